// SPDX-License-Identifier: MIT

package wasm

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const keptCopySupported = true

// keptDigest returns the sha256 of data, read from the module at path, if the cache dir
// keeps an undamaged copy of exactly these bytes for that path. The copy is mapped from the
// page cache for the comparison only. Any other entry (damaged, another version's) is
// written again once the caller has hashed the bytes (keepCopy).
func keptDigest(cacheDir, path string, data []byte) (string, bool) {
	if cacheDir == "" {
		return "", false
	}
	entry := keptPath(cacheDir, path)
	f, err := os.OpenFile(entry, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(keptHeader+len(data)) {
		return "", false // another version's copy (rewritten once hashed), or not a copy
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return "", false
	}
	defer unix.Munmap(m)
	digest, ok := keptMatch(m, data)
	return digest, ok
}
