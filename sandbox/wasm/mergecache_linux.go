// SPDX-License-Identifier: MIT

package wasm

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const mergedCacheSupported = true

// loadMerged maps the merged bytes of the module with key from the cache dir, read-only,
// and returns them with the function that unmaps them (once nothing uses them: the compiled
// module keeps slices of them). A missing entry is not found; a bad one is also deleted.
func loadMerged(cacheDir string, key [32]byte) (merged []byte, unmap func(), ok bool) {
	if cacheDir == "" {
		return nil, nil, false
	}
	path := mergedPath(cacheDir, key)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() < int64(mergedHeader) || st.Size() > 2*MaxModuleBytes {
		_ = os.Remove(path)
		return nil, nil, false
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, false
	}
	merged, ok = checkMerged(m, key)
	if !ok {
		_ = unix.Munmap(m)
		_ = os.Remove(path)
		return nil, nil, false
	}
	return merged[:len(merged):len(merged)], func() { _ = unix.Munmap(m) }, true
}
