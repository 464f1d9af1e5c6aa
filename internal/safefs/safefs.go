// SPDX-License-Identifier: MIT

// Package safefs is how fledge touches a path that a plugin or its commands can write: a
// plugin's data dir, a project, a private temp dir. Every operation takes a root (a
// directory fledge trusts, opened as given) and a path relative to it, and resolves that
// path one directory handle at a time without following a symlink in any element and
// without "..": a plugin that replaced a directory of its data dir with a symlink to /etc
// makes the operation fail with ErrUnsafePath instead of making fledge (often root) create,
// write, chmod or remove something where the link points.
//
// os.Root is not enough for this: it follows symlinks that stay inside the root, and a
// link that stays inside today can be swapped for one that does not between two calls.
package safefs

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrUnsafePath: an element of the path is a symlink, or the path is absolute or has "..",
// or it names something other than a directory where a directory is needed.
var ErrUnsafePath = errors.New("refusing a path that leads through a symlink or out of its root")

// maxElems bounds the elements of a relative path (PATH_MAX / 2: "a/" per element).
const maxElems = 2048

// UnsafePathError says which path was refused and why.
type UnsafePathError struct {
	Root, Rel string
	Why       string
}

func (e *UnsafePathError) Error() string {
	return fmt.Sprintf("%s: %s (beneath %s): %v", e.Rel, e.Why, e.Root, ErrUnsafePath)
}

func (e *UnsafePathError) Is(target error) bool { return target == ErrUnsafePath }

// split checks rel and returns its elements: relative, no "..", no ".", no empty element
// except that "" and "." mean the root itself (no elements).
func split(root, rel string) ([]string, error) {
	if rel == "" || rel == "." {
		return nil, nil
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") {
		return nil, &UnsafePathError{Root: root, Rel: rel, Why: "absolute path"}
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return nil, &UnsafePathError{Root: root, Rel: rel, Why: "NUL byte"}
	}
	elems := strings.Split(rel, "/")
	if len(elems) > maxElems {
		return nil, &UnsafePathError{Root: root, Rel: rel, Why: fmt.Sprintf("more than %d elements", maxElems)}
	}
	for _, e := range elems {
		switch e {
		case "..":
			return nil, &UnsafePathError{Root: root, Rel: rel, Why: `".." element`}
		case "", ".":
			return nil, &UnsafePathError{Root: root, Rel: rel, Why: "not a clean path"}
		}
	}
	return elems, nil
}
