// SPDX-License-Identifier: MIT

//go:build !unix

package wasm

import (
	"errors"
	"os"
)

// dupFile is unix-only; elsewhere the caller must keep its stdio files open while the
// module runs.
func dupFile(f *os.File) (*os.File, error) {
	return nil, errors.New("duplicating stdio is not supported on this OS")
}
