// SPDX-License-Identifier: MIT

package wasm

import "golang.org/x/sys/unix"

// commitUnit is the step a mapped memory is made accessible in: a transparent huge page, so
// that each 2 MiB of it the guest touches costs one page fault instead of 512 (a Go-built
// guest touches 3-4 MiB before its first output).
const commitUnit = 2 << 20

// hugePages asks for transparent huge pages in region; where the system gives none
// (transparent_hugepage "never"), ordinary pages are used.
func hugePages(region []byte) { _ = unix.Madvise(region, unix.MADV_HUGEPAGE) }
