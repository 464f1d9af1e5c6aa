// SPDX-License-Identifier: MIT

package wasm

import (
	"encoding/binary"
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

// checkMerged returns the merged bytes of entry if it is a whole, undamaged entry for key.
func checkMerged(entry []byte, key [32]byte) ([]byte, bool) {
	if len(entry) < mergedHeader || string(entry[:len(mergedMagic)]) != mergedMagic {
		return nil, false
	}
	k := entry[len(mergedMagic) : len(mergedMagic)+32]
	length := entry[len(mergedMagic)+32 : len(mergedMagic)+40]
	sum := binary.LittleEndian.Uint32(entry[len(mergedMagic)+40 : mergedHeader])
	merged := entry[mergedHeader:]
	if string(k) != string(key[:]) || binary.LittleEndian.Uint64(length) != uint64(len(merged)) || mergedSum(key, length, merged) != sum {
		return nil, false
	}
	return merged, true
}
