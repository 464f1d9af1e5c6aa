// SPDX-License-Identifier: MIT

//go:build !unix

package jsonrpc

import "io"

func pollableInput(in io.Reader) (io.Reader, func()) { return in, func() {} }
