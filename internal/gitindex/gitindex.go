// SPDX-License-Identifier: MIT

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
	eoieSig     = "EOIE"
	ieotSig     = "IEOT"
	// maxRefused is how many refused paths Index.Refused lists (one is enough to act).
	maxRefused = 16
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
	// Refused are paths (at most maxRefused) git's verify_path refuses (VerifyPath): git
	// never adds them to an index, but checks an index out without asking, so one there
	// writes into .git (hooks, config) or out of the checkout.
	Refused []string
}

// Parse reads the index in b (the whole file, already bounded by the caller). hashLen is
// the repository's object hash length (20 for SHA-1, 32 for SHA-256); maxEntries bounds the
// entries (ErrTooMany past it); allPaths fills Index.Paths.
//
// It reads every entry as git does (read-cache.c create_from_disk): a name's length is
// the one in the entry's flags unless that is 0xFFF (then the name ends at its NUL), the
// byte at that length must be the NUL, and a version-4 entry's name is the previous
// entry's full name, less what it strips, and its own bytes. A name git reads with a NUL
// inside it is kept as git keeps it, and is in Index.Refused. Where git could read the
// entries otherwise (the EOIE and IEOT extensions, which let git start reading at offsets
// the file states), those offsets must be the entries' own, or the index is not read.
func Parse(b []byte, hashLen, maxEntries int, allPaths bool) (*Index, error) {
	ver, n, err := parseHeader(b, hashLen, maxEntries)
	if err != nil {
		return nil, err
	}
	idx := &Index{Version: int(ver)}
	end := len(b) - hashLen // the trailing checksum
	extAt, blocks, err := entryTable(b, hashLen, end)
	if err != nil {
		return nil, err
	}
	r := &entryReader{b: b, hashLen: hashLen, end: end, ver: ver, off: hdrLen}
	empty := false
	bi, nextBlock := 0, uint64(0) // the next IEOT block, and the entry it starts at
	for i := uint32(0); i < n; i++ {
		blockStart := false
		if bi < len(blocks) && uint64(i) == nextBlock {
			if blocks[bi].offset != r.off {
				return nil, fmt.Errorf("%w: entry %d is at %d, the IEOT extension says %d", ErrFormat, i, r.off, blocks[bi].offset)
			}
			nextBlock += uint64(blocks[bi].nr)
			bi++
			blockStart = true
		}
		name, mode, err := r.entry(i, blockStart)
		if err != nil {
			return nil, err
		}
		if idx.add(name, mode, allPaths) {
			empty = true
		}
	}
	if bi != len(blocks) || (len(blocks) > 0 && nextBlock != uint64(n)) {
		return nil, fmt.Errorf("%w: the IEOT extension's blocks do not cover the %d entries", ErrFormat, n)
	}
	if extAt >= 0 && extAt != r.off {
		return nil, fmt.Errorf("%w: the entries end at %d, the EOIE extension says %d", ErrFormat, r.off, extAt)
	}
	if err := idx.readExtensions(b, r.off, end, hashLen); err != nil {
		return nil, err
	}
	if empty && idx.SharedIndex == "" && len(idx.Refused) < maxRefused {
		idx.Refused = append(idx.Refused, "")
	}
	return idx, nil
}

// parseHeader checks the hash length, the DIRC signature and the version, and returns the
// version and the entry count, refusing a count past maxEntries before anything is read.
func parseHeader(b []byte, hashLen, maxEntries int) (ver, n uint32, _ error) {
	if hashLen != sha1Len && hashLen != sha256Len {
		return 0, 0, fmt.Errorf("%w: hash length %d", ErrFormat, hashLen)
	}
	if len(b) < hdrLen+hashLen || string(b[:4]) != "DIRC" {
		return 0, 0, fmt.Errorf("%w: no DIRC header", ErrFormat)
	}
	ver = binary.BigEndian.Uint32(b[4:8])
	if ver < 2 || ver > 4 {
		return 0, 0, fmt.Errorf("%w: version %d", ErrFormat, ver)
	}
	n = binary.BigEndian.Uint32(b[8:12])
	if int64(n) > int64(maxEntries) {
		return 0, 0, fmt.Errorf("%w: %d entries (at most %d are read)", ErrTooMany, n, maxEntries)
	}
	return ver, n, nil
}

// entryReader reads the entries one after another; it carries the offset and, for
// version 4, the previous entry's path that the next one's name is built on.
type entryReader struct {
	b       []byte
	hashLen int
	end     int // where the trailing checksum starts
	ver     uint32
	off     int    // the next entry's offset
	prev    []byte // v4: the previous entry's path
}

// entry reads entry i at r.off and moves r.off past it. blockStart says an IEOT block
// starts here, where git reads with no previous name.
func (r *entryReader) entry(i uint32, blockStart bool) (name []byte, mode uint32, _ error) {
	b, end, off := r.b, r.end, r.off
	fixed := statLen + r.hashLen + 2
	if off+fixed > end {
		return nil, 0, fmt.Errorf("%w: entry %d cut short", ErrFormat, i)
	}
	mode = binary.BigEndian.Uint32(b[off+24 : off+28])
	flags := binary.BigEndian.Uint16(b[off+statLen+r.hashLen:])
	flen := int(flags & nameMask)
	p := off + fixed
	if flags&flagExt != 0 {
		if r.ver < 3 {
			return nil, 0, fmt.Errorf("%w: extended flags in a version %d index", ErrFormat, r.ver)
		}
		p += 2
		if p > end {
			return nil, 0, fmt.Errorf("%w: entry %d cut short", ErrFormat, i)
		}
	}
	keep := 0
	if r.ver == 4 {
		var used int
		var err error
		if keep, used, err = r.prefixKept(b[p:end], i, blockStart); err != nil {
			return nil, 0, err
		}
		p += used
	}
	own, err := r.ownNameLen(p, flen, keep, i)
	if err != nil {
		return nil, 0, err
	}
	if keep+own > maxPathLen {
		return nil, 0, fmt.Errorf("%w: entry %d: path longer than %d bytes", ErrFormat, i, maxPathLen)
	}
	if r.ver == 4 {
		name = append(r.prev[:keep:keep], b[p:p+own]...)
		r.prev = name
		r.off = p + own + 1
	} else {
		name = b[p : p+own]
		// 1 to 8 NULs pad the entry to a multiple of 8 bytes.
		size := (p - off + own + 8) &^ 7
		if off+size > end {
			return nil, 0, fmt.Errorf("%w: entry %d cut short", ErrFormat, i)
		}
		r.off += size
	}
	return name, mode, nil
}

// prefixKept reads a version-4 entry's strip count from rest and returns how many bytes
// of the previous path the name keeps, and the bytes the count took.
func (r *entryReader) prefixKept(rest []byte, i uint32, blockStart bool) (keep, used int, _ error) {
	strip, used, err := varint(rest)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: entry %d: %w", ErrFormat, i, err)
	}
	if strip > uint64(len(r.prev)) {
		return 0, 0, fmt.Errorf("%w: entry %d strips %d bytes of a %d-byte path", ErrFormat, i, strip, len(r.prev))
	}
	keep = len(r.prev) - int(strip)
	// git reads the first entry of an IEOT block with no previous name: it must
	// strip all of it, or git's name and this one differ.
	if blockStart && keep != 0 {
		return 0, 0, fmt.Errorf("%w: entry %d starts an IEOT block and keeps %d bytes of the previous path", ErrFormat, i, keep)
	}
	return keep, used, nil
}

// ownNameLen returns how many of the name's bytes are in this entry, starting at p: all
// of them, or (v4) those after the kept prefix. The length is the one in the flags unless
// that is nameMask, and the byte at it must be the NUL, as git reads it.
func (r *entryReader) ownNameLen(p, flen, keep int, i uint32) (int, error) {
	b, end := r.b, r.end
	if flen == nameMask {
		own := bytes.IndexByte(b[p:end], 0)
		if own < 0 {
			return 0, fmt.Errorf("%w: entry %d: path not terminated", ErrFormat, i)
		}
		return own, nil
	}
	if flen < keep {
		return 0, fmt.Errorf("%w: entry %d: path length %d is shorter than the %d bytes it keeps", ErrFormat, i, flen, keep)
	}
	own := flen - keep
	if p+own >= end {
		return 0, fmt.Errorf("%w: entry %d cut short", ErrFormat, i)
	}
	if b[p+own] != 0 {
		return 0, fmt.Errorf("%w: entry %d: no NUL at the path length %d its flags give", ErrFormat, i, flen)
	}
	return own, nil
}

// add files one entry's path under what it is; it reports an empty path, which is only
// refused once the link extension is known.
func (idx *Index) add(name []byte, mode uint32, allPaths bool) (empty bool) {
	if len(name) == 0 {
		// A split index's replacement entries carry no path; anywhere else git would
		// refuse it (checked once the link extension is known).
		empty = true
	} else if !verifyPath(name, mode) && len(idx.Refused) < maxRefused {
		idx.Refused = append(idx.Refused, string(name))
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
	return empty
}

// readExtensions walks the extensions from off to the checksum at end (a 4-byte signature
// and a 4-byte length each) and records the split index's shared index from the link one.
func (idx *Index) readExtensions(b []byte, off, end, hashLen int) error {
	for off < end {
		if off+extHdrLen > end {
			return fmt.Errorf("%w: extension header cut short", ErrFormat)
		}
		sig := string(b[off : off+4])
		size := int64(binary.BigEndian.Uint32(b[off+4 : off+8]))
		off += extHdrLen
		if int64(off)+size > int64(end) {
			return fmt.Errorf("%w: extension %q cut short", ErrFormat, sig)
		}
		if sig == linkSig {
			if size < int64(hashLen) {
				return fmt.Errorf("%w: link extension shorter than a hash", ErrFormat)
			}
			idx.SharedIndex = hex.EncodeToString(b[off : off+hashLen])
		}
		off += int(size)
	}
	return nil
}

// ieotBlock is one block of the IEOT extension: git may read its nr entries, in a thread
// of their own, from offset.
type ieotBlock struct {
	offset int
	nr     uint32
}

// entryTable reads the EOIE extension (git's "end of index entries": the offset where
// the extensions begin, stated as the index's last extension) and the IEOT extension it
// leads to. git reads both only when it loads an index in threads (index.threads, on by
// default for a large index), and then takes the extensions from EOIE's offset and the
// entries from IEOT's: Parse requires them to be its own. extAt is -1 when there is no
// EOIE. An EOIE git would ignore (its hash of the extension headers wrong) is read all the
// same: a mismatch then only fails closed.
func entryTable(b []byte, hashLen, end int) (extAt int, blocks []ieotBlock, _ error) {
	pos := end - (extHdrLen + 4 + hashLen)
	if pos < hdrLen || string(b[pos:pos+4]) != eoieSig || binary.BigEndian.Uint32(b[pos+4:]) != uint32(4+hashLen) {
		return -1, nil, nil
	}
	at := int64(binary.BigEndian.Uint32(b[pos+8:]))
	if at < hdrLen || at > int64(pos) {
		return 0, nil, fmt.Errorf("%w: EOIE offset %d out of the index", ErrFormat, at)
	}
	extAt = int(at)
	for off := extAt; off < pos; {
		if off+extHdrLen > pos {
			return 0, nil, fmt.Errorf("%w: extension header before EOIE cut short", ErrFormat)
		}
		sig := string(b[off : off+4])
		size := int64(binary.BigEndian.Uint32(b[off+4 : off+8]))
		off += extHdrLen
		if int64(off)+size > int64(pos) {
			return 0, nil, fmt.Errorf("%w: extension %q runs past EOIE", ErrFormat, sig)
		}
		if sig == ieotSig {
			if blocks != nil {
				return 0, nil, fmt.Errorf("%w: two IEOT extensions", ErrFormat)
			}
			e := b[off : off+int(size)]
			if len(e) < 4 || binary.BigEndian.Uint32(e) != 1 || (len(e)-4)%8 != 0 {
				return 0, nil, fmt.Errorf("%w: IEOT extension not version 1 or of a bad length", ErrFormat)
			}
			blocks = make([]ieotBlock, 0, (len(e)-4)/8)
			for e = e[4:]; len(e) > 0; e = e[8:] {
				nr := binary.BigEndian.Uint32(e[4:])
				if nr == 0 {
					return 0, nil, fmt.Errorf("%w: empty IEOT block", ErrFormat)
				}
				blocks = append(blocks, ieotBlock{offset: int(binary.BigEndian.Uint32(e)), nr: nr})
			}
		}
		off += int(size)
	}
	return extAt, blocks, nil
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
