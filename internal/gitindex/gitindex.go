// Package gitindex reads what fledge needs of a git index file (.git/index, the "DIRC"
// format, versions 2, 3 and 4): the paths recorded as gitlinks (mode 160000, a submodule
// or nested repository), which the user's git status recurses into, running that
// repository's config (core.fsmonitor) and hooks.
//
// It is written here rather than taken from go-git's plumbing/format/index because that
// module pulls in the whole of go-git (object storage, transports, crypto) for one
// 300-line reader, and because fledge reads an index a confined command could write: every
// length is checked against the bytes that are there, and the caller bounds the input and
// the number of entries (Parse). Never run the host's git on such a repository instead:
// its config is exactly what is being defended against.
package gitindex

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrFormat: the bytes are not an index this package reads (a bad signature, version or
// length). git refuses such an index too ("index file corrupt"), except what it reads and
// this package does not: callers fail closed on it.
var ErrFormat = errors.New("not a readable git index")

// ErrTooMany: the index has more entries than the caller's bound.
var ErrTooMany = errors.New("git index has too many entries")

// ModeGitlink is the mode git records for a submodule or nested repository.
const ModeGitlink = 0o160000

const (
	hdrLen      = 12
	statLen     = 40 // ctime, mtime (8 each), dev, ino, mode, uid, gid, size (4 each)
	flagExt     = 0x4000
	nameMask    = 0x0fff
	maxPathLen  = 4096 * 4 // longer than any path a file system holds
	linkSig     = "link"
	extHdrLen   = 8
	sha1Len     = 20
	sha256Len   = 32
	maxVarBytes = 10
)

// Index is what Parse found.
type Index struct {
	Version int
	// Gitlinks are the paths of the entries with mode 160000, as recorded (slash-separated,
	// relative to the checkout); entries with an empty path are not among them.
	Gitlinks []string
	// StrippedGitlink: a split index's own entry replaced a shared entry with a gitlink
	// without repeating its path (the path is the shared entry's, found by a bitmap this
	// package does not read): every path of the shared index may be one.
	StrippedGitlink bool
	// SharedIndex is the hash (hex) the "link" extension names: the entries also come from
	// sharedindex.<SharedIndex> beside the index (split index). "" when none.
	SharedIndex string
	// Paths are every entry's path, when Parse was asked for them (a shared index whose
	// replaced entry is a gitlink).
	Paths []string
}

// Parse reads the index in b (the whole file, already bounded by the caller). hashLen is
// the repository's object hash length (20 for SHA-1, 32 for SHA-256); maxEntries bounds the
// entries (ErrTooMany past it); allPaths fills Index.Paths.
func Parse(b []byte, hashLen, maxEntries int, allPaths bool) (*Index, error) {
	if hashLen != sha1Len && hashLen != sha256Len {
		return nil, fmt.Errorf("%w: hash length %d", ErrFormat, hashLen)
	}
	if len(b) < hdrLen+hashLen || string(b[:4]) != "DIRC" {
		return nil, fmt.Errorf("%w: no DIRC header", ErrFormat)
	}
	ver := binary.BigEndian.Uint32(b[4:8])
	if ver < 2 || ver > 4 {
		return nil, fmt.Errorf("%w: version %d", ErrFormat, ver)
	}
	n := binary.BigEndian.Uint32(b[8:12])
	if int64(n) > int64(maxEntries) {
		return nil, fmt.Errorf("%w: %d entries (at most %d are read)", ErrTooMany, n, maxEntries)
	}
	idx := &Index{Version: int(ver)}
	end := len(b) - hashLen // the trailing checksum
	off := hdrLen
	var prev []byte // v4: the previous entry's path
	for i := uint32(0); i < n; i++ {
		fixed := statLen + hashLen + 2
		if off+fixed > end {
			return nil, fmt.Errorf("%w: entry %d cut short", ErrFormat, i)
		}
		mode := binary.BigEndian.Uint32(b[off+24 : off+28])
		flags := binary.BigEndian.Uint16(b[off+statLen+hashLen:])
		p := off + fixed
		if flags&flagExt != 0 {
			if ver < 3 {
				return nil, fmt.Errorf("%w: extended flags in a version %d index", ErrFormat, ver)
			}
			p += 2
			if p > end {
				return nil, fmt.Errorf("%w: entry %d cut short", ErrFormat, i)
			}
		}
		var name []byte
		if ver == 4 {
			strip, used, err := varint(b[p:end])
			if err != nil {
				return nil, fmt.Errorf("%w: entry %d: %w", ErrFormat, i, err)
			}
			p += used
			if strip > uint64(len(prev)) {
				return nil, fmt.Errorf("%w: entry %d strips %d bytes of a %d-byte path", ErrFormat, i, strip, len(prev))
			}
			nul := bytes.IndexByte(b[p:end], 0)
			if nul < 0 {
				return nil, fmt.Errorf("%w: entry %d: path not terminated", ErrFormat, i)
			}
			keep := len(prev) - int(strip)
			if keep+nul > maxPathLen {
				return nil, fmt.Errorf("%w: entry %d: path longer than %d bytes", ErrFormat, i, maxPathLen)
			}
			name = append(prev[:keep:keep], b[p:p+nul]...)
			prev = name
			off = p + nul + 1
		} else {
			nul := bytes.IndexByte(b[p:end], 0)
			if nul < 0 {
				return nil, fmt.Errorf("%w: entry %d: path not terminated", ErrFormat, i)
			}
			if l := int(flags & nameMask); l != nameMask && l != nul {
				return nil, fmt.Errorf("%w: entry %d: path length %d, flags say %d", ErrFormat, i, nul, l)
			}
			if nul > maxPathLen {
				return nil, fmt.Errorf("%w: entry %d: path longer than %d bytes", ErrFormat, i, maxPathLen)
			}
			name = b[p : p+nul]
			// 1 to 8 NULs pad the entry to a multiple of 8 bytes.
			size := (p - off + nul + 8) &^ 7
			if off+size > end {
				return nil, fmt.Errorf("%w: entry %d cut short", ErrFormat, i)
			}
			off += size
		}
		if allPaths && len(name) > 0 {
			idx.Paths = append(idx.Paths, string(name))
		}
		if mode == ModeGitlink {
			if len(name) == 0 {
				idx.StrippedGitlink = true
			} else {
				idx.Gitlinks = append(idx.Gitlinks, string(name))
			}
		}
	}
	// Extensions: a 4-byte signature and a 4-byte length each, up to the checksum.
	for off < end {
		if off+extHdrLen > end {
			return nil, fmt.Errorf("%w: extension header cut short", ErrFormat)
		}
		sig := string(b[off : off+4])
		size := int64(binary.BigEndian.Uint32(b[off+4 : off+8]))
		off += extHdrLen
		if int64(off)+size > int64(end) {
			return nil, fmt.Errorf("%w: extension %q cut short", ErrFormat, sig)
		}
		if sig == linkSig {
			if size < int64(hashLen) {
				return nil, fmt.Errorf("%w: link extension shorter than a hash", ErrFormat)
			}
			idx.SharedIndex = hex.EncodeToString(b[off : off+hashLen])
		}
		off += int(size)
	}
	return idx, nil
}

// varint is git's offset varint (varint.c): each continuation adds one before shifting.
func varint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < maxVarBytes; i++ {
		c := b[i]
		if i == 0 {
			v = uint64(c & 0x7f)
		} else {
			v = ((v + 1) << 7) | uint64(c&0x7f)
		}
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("bad varint")
}
