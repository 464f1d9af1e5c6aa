//go:build !(unix || windows)

package sysfs

import (
	"os"

	"github.com/fledgehq/fledge/third_party/wazero/experimental/sys"
)

func rename(from, to string) sys.Errno {
	if from == to {
		return 0
	}
	return sys.UnwrapOSError(os.Rename(from, to))
}
