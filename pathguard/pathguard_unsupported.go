// SPDX-License-Identifier: MIT

//go:build !unix

package pathguard

import "os"

// No handle-based resolution here (no openat2, no O_DIRECTORY, no device and inode to pin a
// directory by): New refuses every root with ErrUnsupported, so nothing ever runs in a
// directory this package did not check.

//lint:ignore U1000 the per-OS halves of root and Guard; only Linux fills them
type (
	rootSys  struct{}
	guardSys struct{}
)

func openRootSys(*root) error { return ErrUnsupported }

func closeRootSys(*root) error { return nil }

func (g *Guard) openBeneath(*root, string) (*os.File, error) { return nil, ErrUnsupported }

func onProcfs(*root, string) bool { return false }

func handlePath(*os.File) (string, bool) { return "", false }

func statDevIno(*os.File) (dev, ino uint64, isDir bool, err error) {
	return 0, 0, false, ErrUnsupported
}

// Verify fails: no directory is ever resolved here.
func Verify(f *os.File, dev, ino uint64) error {
	name := ""
	if f != nil {
		name = f.Name()
	}
	return refuse(ReasonInvalid, name, "", ErrUnsupported)
}

// Verify checks the handle against the identity recorded when it was resolved.
func (d *Dir) Verify() error { return Verify(d.File, d.Dev, d.Ino) }
