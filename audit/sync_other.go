//go:build !unix

package audit

import "os"

// deferredSync syncs at once where descriptors cannot be duplicated portably.
func deferredSync(f *os.File, path string, syncFn func(*os.File) error) (func() error, error) {
	if err := syncFn(f); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}
