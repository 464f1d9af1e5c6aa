// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// LockFile serialises registry updates between fledge processes.
const LockFile = "plugins.lock"

// ErrBusy: another fledge process held the registry lock for too long.
var ErrBusy = errors.New("plugin registry is busy")

// lockTimeout bounds the wait for the registry lock.
var lockTimeout = 30 * time.Second

// lockRegistry takes an exclusive flock on <config>/plugins.lock, waiting at most lockTimeout.
// Callers re-read plugins.toml after locking, so two installs never overwrite each other.
func lockRegistry(configDir string) (unlock func(), err error) {
	if err := os.MkdirAll(configDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(configDir, LockFile), os.O_RDWR|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(lockTimeout)
	for {
		err := tryLockFile(f)
		if err == nil {
			return func() {
				unlockFile(f)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w: waited %s for %s", ErrBusy, lockTimeout, LockFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
