// SPDX-License-Identifier: MIT

package wasm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync/atomic"
)

// A start in a new process hashed the whole module to name it in the plugin_start record
// (sha256 of 3.8 MB: 2.1 ms of CPU). fledge now keeps, in the compilation cache dir, a copy
// of the bytes it hashed with their sha256, found by the module's path; a new process that
// reads the same bytes at that path compares them with the copy (0.3 ms, its checksum
// included) and names them by that sha256 instead of hashing them again. A read that
// differs in any byte is hashed as before, and the copy written again (as is a damaged one).
//
// The copy is used only whole and undamaged: its entry ends its header with a CRC-32 of the
// sha256, the length and the bytes, checked before the comparison; a bad entry is deleted.
// So the sha256 named is that of the bytes read, as long as the cache dir holds what fledge
// wrote there: the same trust as the machine code beside it (only fledge can write the
// dir, ErrCacheDir), and, as there, the checksum catches damage, not forgery. Entries are
// written to a temporary file and renamed.

const keptMagic = "FLMODUL1"

// keptHeader: magic, sha256, length of the bytes, CRC-32 (IEEE) of the sha256, the length
// and the bytes.
const keptHeader = len(keptMagic) + 32 + 8 + 4

// keptDir is the subdirectory of the cache dir holding the copies.
const keptDir = "fledge-modules"

// hashes counts modules hashed whole (readVerified), for tests.
var hashes atomic.Int64

func keptPath(cacheDir, module string) string {
	name := sha256.Sum256([]byte(module))
	return filepath.Join(cacheDir, keptDir, hex.EncodeToString(name[:]))
}

func keptSum(digest, length, data []byte) uint32 {
	sum := crc32.Update(crc32.ChecksumIEEE(digest), crc32.IEEETable, length)
	return crc32.Update(sum, crc32.IEEETable, data)
}

// keepCopy writes data, whose sha256 is digest, as the copy for the module at path (best
// effort: without it the next process hashes the module again).
func keepCopy(cacheDir, path, digest string, data []byte) {
	sum, err := hex.DecodeString(digest)
	if !keptCopySupported || cacheDir == "" || err != nil || len(sum) != sha256.Size {
		return
	}
	dir := filepath.Join(cacheDir, keptDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	entry := make([]byte, keptHeader, keptHeader+len(data))
	copy(entry, keptMagic)
	copy(entry[len(keptMagic):], sum)
	binary.LittleEndian.PutUint64(entry[len(keptMagic)+32:], uint64(len(data)))
	binary.LittleEndian.PutUint32(entry[len(keptMagic)+40:], keptSum(sum, entry[len(keptMagic)+32:len(keptMagic)+40], data))
	f, err := os.CreateTemp(dir, "*.tmp")
	if err != nil {
		return
	}
	_, err = f.Write(append(entry, data...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), keptPath(cacheDir, path))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
}
