// SPDX-License-Identifier: MIT

//go:build unix && !linux

package pathguard

import (
	"os"
	"syscall"
)

// rootSys and guardSys are empty here: os.Root holds the directory fd and does every lookup.
//
//lint:ignore U1000 the per-OS halves of root and Guard; only Linux fills them
type (
	rootSys  struct{}
	guardSys struct{}
)

func openRootSys(rt *root) error {
	r, err := os.OpenRoot(rt.path)
	if err != nil {
		return err
	}
	fi, err := r.Stat(".")
	if err != nil {
		r.Close()
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		r.Close()
		return &os.PathError{Op: "stat", Path: rt.path, Err: syscall.ENOTSUP}
	}
	rt.r = r
	rt.dev, rt.ino = uint64(st.Dev), uint64(st.Ino)
	return nil
}

func closeRootSys(*root) error { return nil }

// openBeneath walks rel from the root fd with os.Root, which refuses ".." above the root and
// symbolic links that are absolute or leave it.
func (g *Guard) openBeneath(rt *root, rel string) (*os.File, error) {
	return rt.r.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// onProcfs is false: magic links are a Linux procfs thing.
func onProcfs(*root, string) bool { return false }

// handlePath has no portable answer here; displayPath falls back to the cleaned request.
func handlePath(*os.File) (string, bool) { return "", false }
