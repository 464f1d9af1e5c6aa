// SPDX-License-Identifier: MIT

//go:build !unix

package audit

import (
	"fmt"
	"os"
	"time"
)

// The audit log relies on O_NOFOLLOW, flock and POSIX ownership; fledge only supports unix
// hosts, so elsewhere every operation fails with ErrUnsupported instead of writing an
// unprotected log.

const (
	lockEx = 2
	lockSh = 1
)

func ensureDir(string) error { return fmt.Errorf("%w on this OS", ErrUnsupported) }

func openPrivate(string, int) (*os.File, error) {
	return nil, fmt.Errorf("%w on this OS", ErrUnsupported)
}

func openReadOnly(string) (*os.File, error) {
	return nil, fmt.Errorf("%w on this OS", ErrUnsupported)
}

func flockWait(*os.File, int, time.Duration) error {
	return fmt.Errorf("%w on this OS", ErrUnsupported)
}

func funlock(*os.File) error { return fmt.Errorf("%w on this OS", ErrUnsupported) }

func syncDir(string) error { return fmt.Errorf("%w on this OS", ErrUnsupported) }

func fileIno(os.FileInfo) uint64 { return 0 }
