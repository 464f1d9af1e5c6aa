// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fledgehq/fledge/sandbox"
)

// checkTrustBundle refuses a trust bundle (Spec.TrustBundle) that is not the clean,
// absolute path of a regular file, or that lies in a denied path (the view would show a
// denied file's content). A symlink is refused rather than followed: what the view shows
// is the file checked here.
func checkTrustBundle(spec *sandbox.Spec) error {
	p := spec.TrustBundle
	if p == "" {
		return nil
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%w: trust bundle %q is not a clean absolute path", sandbox.ErrInvalidSpec, p)
	}
	st, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("%w: trust bundle: %w", sandbox.ErrInvalidSpec, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: trust bundle %s is not a regular file", sandbox.ErrInvalidSpec, p)
	}
	for _, d := range spec.Access.Deny {
		for _, df := range forms(d) {
			for _, pf := range forms(p) {
				if within(pf, df) {
					return fmt.Errorf("%w: trust bundle %s lies in denied path %s", sandbox.ErrInvalidSpec, p, d)
				}
			}
		}
	}
	return nil
}
