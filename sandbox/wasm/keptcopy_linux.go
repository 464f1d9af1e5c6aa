// SPDX-License-Identifier: MIT

package wasm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
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

// keptMatch returns the sha256 of data if entry is a whole, undamaged copy of exactly data.
func keptMatch(entry, data []byte) (string, bool) {
	if len(entry) != keptHeader+len(data) || string(entry[:len(keptMagic)]) != keptMagic {
		return "", false
	}
	digest := entry[len(keptMagic) : len(keptMagic)+32]
	length := entry[len(keptMagic)+32 : len(keptMagic)+40]
	sum := binary.LittleEndian.Uint32(entry[len(keptMagic)+40 : keptHeader])
	kept := entry[keptHeader:]
	if binary.LittleEndian.Uint64(length) != uint64(len(data)) || keptSum(digest, length, kept) != sum {
		return "", false
	}
	if !bytes.Equal(kept, data) {
		return "", false
	}
	return hex.EncodeToString(digest), true
}
