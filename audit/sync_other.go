//go:build !unix

package audit

import "os"

// deferredSync syncs at once where descriptors cannot be duplicated portably.
func deferredSync(f *os.File, path string) (func() error, error) {
	if err := f.Sync(); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}
