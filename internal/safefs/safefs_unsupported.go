// SPDX-License-Identifier: MIT

//go:build !unix

package safefs

import (
	"errors"
	"os"
)

// Every operation refuses here: there is no openat walk without following symlinks on this
// OS, and an operation that could be led astray is worse than none. Lstat (unix.Stat_t) is
// unix only.

// errUnsupported is returned by every operation on this OS.
var errUnsupported = errors.New("safefs: not supported on this OS")

// OpenDir refuses on this OS.
func OpenDir(root, rel string) (*os.File, error) { return nil, errUnsupported }

// MkdirAll refuses on this OS.
func MkdirAll(root, rel string, perm os.FileMode) error { return errUnsupported }

// Mkdir refuses on this OS.
func Mkdir(root, rel string, perm os.FileMode) error { return errUnsupported }

// CreateExcl refuses on this OS.
func CreateExcl(root, rel string, perm os.FileMode) (*os.File, error) { return nil, errUnsupported }

// RenameNoReplace refuses on this OS.
func RenameNoReplace(root, rel, newName string) error { return errUnsupported }
