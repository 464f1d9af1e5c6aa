// SPDX-License-Identifier: MIT

package wasm

import "os"

// commitUnit is the step a mapped memory is made accessible in.
var commitUnit = os.Getpagesize()

func hugePages([]byte) {}
