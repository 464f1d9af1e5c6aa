// SPDX-License-Identifier: MIT

package gitindex

const (
	modeTypeMask = 0o170000
	modeDir      = 0o040000 // a sparse index's directory entry
	modeSymlink  = 0o120000
)

// VerifyPath reports whether git's verify_path (read-cache.c) would accept name as the
// path of an index entry of this mode, with core.protectNTFS on (git's default on every
// platform) and core.protectHFS off (its default outside macOS; an HFS-ignorable variant
// of .git is a different name on the file systems fledge runs on). git applies it when
// a path is added to the index, never when an index is read or checked out: an index a
// confined command wrote may hold .git/hooks/post-checkout, which the user's
// git checkout -- . then writes into the real .git.
//
// Refused: an empty path or element (a leading, doubled or, but for a sparse directory
// entry, trailing slash), "." and "..", a NUL (git's C string would be another path),
// and per element, split at "/" and "\" (NTFS), ".git" or "git~1" in any case followed
// only by dots and spaces, or by ":" (an NTFS stream), and for a symlink ".gitmodules"
// likewise.
func VerifyPath(name string, mode uint32) bool { return verifyPath(name, mode) }

// verifyPath is VerifyPath on a string or, for Parse, the index's bytes (no copy, one
// pass: it runs on every entry).
func verifyPath[S ~string | ~[]byte](name S, mode uint32) bool {
	n := len(name)
	if n == 0 || refusedPart(name, 0, mode) {
		return false
	}
	start := 0 // of the element
	for i := 0; i < n; i++ {
		switch name[i] {
		case 0:
			return false
		case '\\':
			if refusedPart(name, i+1, mode) {
				return false
			}
		case '/':
			if !elementOK(name, start, i) {
				return false
			}
			if start = i + 1; start == n {
				// A trailing slash: a sparse index's directory entry only.
				return mode&modeTypeMask == modeDir
			}
			if refusedPart(name, start, mode) {
				return false
			}
		}
	}
	return elementOK(name, start, n)
}

// elementOK: name[start:end] is not empty, "." or "..".
func elementOK[S ~string | ~[]byte](name S, start, end int) bool {
	switch end - start {
	case 0:
		return false
	case 1:
		return name[start] != '.'
	case 2:
		return name[start] != '.' || name[start+1] != '.'
	}
	return true
}

// refusedPart: the part of name from i up to a "/", a "\" or the end is what git's
// is_ntfs_dotgit refuses, or for a symlink a plain .gitmodules (git's
// is_ntfs_dotgitmodules also refuses its 8.3 short names, which a symlink here could only
// use to reach a file of the checkout).
func refusedPart[S ~string | ~[]byte](name S, i int, mode uint32) bool {
	if i >= len(name) {
		return false
	}
	switch name[i] {
	case '.', 'g', 'G':
	default:
		return false
	}
	e := i
	for e < len(name) && name[e] != '/' && name[e] != '\\' {
		e++
	}
	return ntfsNamed(name, i, e, ".git") || ntfsNamed(name, i, e, "git~1") ||
		(mode&modeTypeMask == modeSymlink && ntfsNamed(name, i, e, ".gitmodules"))
}

// ntfsNamed: name[start:end] is base (lower-case ASCII; name in any ASCII case) followed
// only by dots and spaces, up to its end or a ":" (what NTFS resolves to base): git's
// is_ntfs_dotgit.
func ntfsNamed[S ~string | ~[]byte](name S, start, end int, base string) bool {
	if end-start < len(base) {
		return false
	}
	for i := 0; i < len(base); i++ {
		c := name[start+i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != base[i] {
			return false
		}
	}
	for i := start + len(base); i < end; i++ {
		switch name[i] {
		case '.', ' ':
		case ':':
			return true
		default:
			return false
		}
	}
	return true
}
