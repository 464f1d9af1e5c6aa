//go:build unix

package audit

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// deferredSync starts an fsync of the file behind f at once, in the background, and
// returns a function that waits for it: the caller's other work (preparing a sandbox)
// overlaps the disk flush. It syncs its own dup of the descriptor, so a rotation (which
// may close f) cannot make it sync the wrong file or fail. syncFn is the fsync (f.Sync;
// tests inject failures).
func deferredSync(f *os.File, path string, syncFn func(*os.File) error) (func() error, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("audit: dup for deferred fsync: %w", err)
	}
	done := make(chan error, 1)
	dup := os.NewFile(uintptr(fd), path)
	go func() {
		err := syncFn(dup)
		dup.Close()
		if err != nil {
			err = fmt.Errorf("audit: fsync %s: %w", path, err)
		}
		done <- err
	}()
	// Let the flush start now, not when this goroutine next blocks: the point is to overlap
	// it with the caller's work.
	runtime.Gosched()
	var res error
	waited := false
	return func() error {
		if !waited {
			res, waited = <-done, true
		}
		return res
	}, nil
}
