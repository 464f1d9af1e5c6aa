package sysfs

import (
	"os"
	"syscall"

	"github.com/fledgehq/fledge/third_party/wazero/experimental/sys"
)

func datasync(f *os.File) sys.Errno {
	return sys.UnwrapOSError(syscall.Fdatasync(int(f.Fd())))
}
