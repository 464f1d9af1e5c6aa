//go:build !(unix || windows)

package sysfs

import (
	"os"

	"github.com/fledgehq/fledge/third_party/wazero/experimental/sys"
)

func unlink(name string) sys.Errno {
	err := os.Remove(name)
	return sys.UnwrapOSError(err)
}
