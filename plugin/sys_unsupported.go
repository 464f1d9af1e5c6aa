// SPDX-License-Identifier: MIT

//go:build !unix

package plugin

import (
	"errors"
	"os"
)

// oNoFollow is nothing here: this OS's open has no such flag (fledge runs no plugin on it).
const oNoFollow = 0

// tryLockFile fails: the registry lock is a flock, which this OS does not have.
func tryLockFile(*os.File) error { return errors.ErrUnsupported }

func unlockFile(*os.File) {}

// hardLinks is unknown here (0).
func hardLinks(os.FileInfo) uint64 { return 0 }

// rootOwned is false: there is no root-owned file here.
func rootOwned(string) bool { return false }
