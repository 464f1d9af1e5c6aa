//go:build !linux

package platform

import (
	"errors"
	"os"
)

// MmapCodeFile is implemented on Linux only (fledge patch): elsewhere a compilation cache
// entry's code is copied into fresh memory as before. (On macOS arm64 every executable
// file-backed page must be code-signed.)
func MmapCodeFile(*os.File, int64, int) ([]byte, error) {
	return nil, errors.New("executable file mappings are not used on this platform")
}
