package gitindex

import "strings"

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
func VerifyPath(name string, mode uint32) bool {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return false
	}
	rest := name
	for {
		el, tail, more := strings.Cut(rest, "/")
		if !more && el == "" {
			// A trailing slash: a sparse index's directory entry only.
			return mode&modeTypeMask == modeDir && rest != name
		}
		if el == "" || el == "." || el == ".." || !ntfsElementOK(el, mode) {
			return false
		}
		if !more {
			return true
		}
		rest = tail
	}
}

// ntfsElementOK checks each part of el between backslashes (is_ntfs_dotgit and, for a
// symlink, a plain .gitmodules: git's is_ntfs_dotgitmodules also refuses its 8.3 short
// names, which a symlink here could only use to reach a file of the checkout).
func ntfsElementOK(el string, mode uint32) bool {
	for _, part := range strings.Split(el, `\`) {
		if ntfsDotGit(part) {
			return false
		}
		if mode&modeTypeMask == modeSymlink && ntfsNamed(part, ".gitmodules") {
			return false
		}
	}
	return true
}

// ntfsDotGit is git's is_ntfs_dotgit on one element: ".git" or "git~1" in any case,
// then only dots and spaces up to the end or a ":".
func ntfsDotGit(s string) bool {
	return ntfsNamed(s, ".git") || ntfsNamed(s, "git~1")
}

// ntfsNamed: s is base (lower-case ASCII; s in any ASCII case) followed only by dots and spaces, up to its end
// or a ":" (what NTFS resolves to base).
func ntfsNamed(s, base string) bool {
	if len(s) < len(base) {
		return false
	}
	for i := 0; i < len(base); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != base[i] {
			return false
		}
	}
	for i := len(base); i < len(s); i++ {
		switch s[i] {
		case '.', ' ':
		case ':':
			return true
		default:
			return false
		}
	}
	return true
}
