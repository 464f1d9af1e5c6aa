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
// may close f) cannot make it sync the wrong file or fail.
func deferredSync(f *os.File, path string) (func() error, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("audit: dup for deferred fsync: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		err := unix.Fsync(fd)
		unix.Close(fd)
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
