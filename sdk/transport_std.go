// SPDX-License-Identifier: MIT

//go:build !wasip1

package sdk

import (
	"io"
	"os"
)

// transport is what New talks over: a native plugin's stdin and stdout.
func transport() (io.Reader, io.Writer) { return os.Stdin, os.Stdout }
