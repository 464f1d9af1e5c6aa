// SPDX-License-Identifier: MIT

package wasm

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"os"
	"path/filepath"
)

// The merged bytes of a module (mergeData) are kept in the compilation cache dir beside its
// machine code, so that a start in a new process maps them from the page cache instead of
// merging again: merging a Go-built module's 41,170 data segments costs 1.3 ms of CPU and
// fills 3.8 MB of fresh memory (about 930 page faults), more than the mapped file and its
// checksum (0.3 ms). An entry is found by the compile key (the sha256 fledge verified of
// the module's bytes and mergeVersion, which are all the merged bytes depend on), and is
// used only whole and for that key: it ends up with a CRC-32 of the key, its length and its
// bytes, checked before anything of it is used; a bad entry is deleted, the module merged
// again and the entry written again. As for the machine code beside it, the checksum
// catches damage, not forgery: the cache dir is one only fledge can write (ErrCacheDir).
// Entries are written to a temporary file and renamed, never written in place, so a mapped
// entry never changes under a running module.

// mergedMagic starts every merged-bytes entry.
const mergedMagic = "FLMERGE1"

// mergedHeader: magic, compile key, length of the merged bytes, CRC-32 (IEEE) of the key,
// the length and the merged bytes.
const mergedHeader = len(mergedMagic) + 32 + 8 + 4

// mergedDir is the subdirectory of the cache dir holding merged-bytes entries.
const mergedDir = "fledge-merged"

func mergedPath(cacheDir string, key [32]byte) string {
	return filepath.Join(cacheDir, mergedDir, hex.EncodeToString(key[:]))
}

// mergedSum is the checksum an entry of merged for key ends its header with.
func mergedSum(key [32]byte, length []byte, merged []byte) uint32 {
	sum := crc32.Update(crc32.ChecksumIEEE(key[:]), crc32.IEEETable, length)
	return crc32.Update(sum, crc32.IEEETable, merged)
}

// storeMerged writes the merged bytes of the module with key into the cache dir (best
// effort: without the entry the next process merges again).
func storeMerged(cacheDir string, key [32]byte, merged []byte) {
	if !mergedCacheSupported || cacheDir == "" {
		return
	}
	dir := filepath.Join(cacheDir, mergedDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	hdr := make([]byte, mergedHeader, mergedHeader+len(merged))
	copy(hdr, mergedMagic)
	copy(hdr[len(mergedMagic):], key[:])
	binary.LittleEndian.PutUint64(hdr[len(mergedMagic)+32:], uint64(len(merged)))
	binary.LittleEndian.PutUint32(hdr[len(mergedMagic)+40:], mergedSum(key, hdr[len(mergedMagic)+32:len(mergedMagic)+40], merged))
	f, err := os.CreateTemp(dir, "*.tmp")
	if err != nil {
		return
	}
	_, err = f.Write(append(hdr, merged...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), mergedPath(cacheDir, key))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
}
