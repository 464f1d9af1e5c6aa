//go:build unix

package audit

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// deferredSync returns a one-shot fsync of the file behind f. It holds its own dup of the
// descriptor so a rotation (which may close f) cannot make it sync the wrong file or fail.
func deferredSync(f *os.File, path string) (func() error, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("audit: dup for deferred fsync: %w", err)
	}
	var once sync.Once
	var serr error
	return func() error {
		once.Do(func() {
			if err := unix.Fsync(fd); err != nil {
				serr = fmt.Errorf("audit: fsync %s: %w", path, err)
			}
			unix.Close(fd)
		})
		return serr
	}, nil
}
