// SPDX-License-Identifier: MIT

//go:build !linux

package plugin

import (
	"fmt"
	"io"
)

type unpacker struct {
	index, setid int
	plain        bool
}

func newUnpacker(string, ImageBounds) (*unpacker, error) {
	return nil, fmt.Errorf("%w: oci: images are unpacked and run on Linux only (openat2, a private filesystem view)", ErrSourceUnsupported)
}

func (u *unpacker) close()                     {}
func (u *unpacker) applyLayer(io.Reader) error { return nil }
