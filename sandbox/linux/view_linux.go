// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
)

// buildView turns spec (rw: its writable roots plus the private tmp) into the private
// filesystem view: every grant bound in (read+exec and read-only ones read-only), the
// implicit system paths, and the protected paths of the writable roots.
//
// The checkouts whose index was read are returned for the check when the run ends
// (quarantineNested); store keeps their gitlinks and baselines (nil: none).
func buildView(spec *sandbox.Spec, rw []string, store *nestedStore) (*kernel.View, []*indexedCheckout, error) {
	v := &kernel.View{}
	add := func(paths []string, w bool) {
		for _, p := range paths {
			v.Mounts = append(v.Mounts, kernel.ViewMount{Path: p, Writable: w})
		}
	}
	add(rw, true)
	add(implicitReadWrite, true)
	add(spec.Access.ReadOnly, false)
	add(implicitReadOnlyFor(spec), false)
	add(spec.Access.ReadExec, false)
	protected, writable := spec.Access.Protected, []string(nil)
	var checkouts []*indexedCheckout
	if protected == nil {
		p, err := gitProtectionWith(spec.Access.ReadWrite, spec.Access.Unprotect, store)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
		}
		protected, writable, checkouts = p.Protected, p.Writable, p.Checkouts
	}
	if spec.TrustBundle != "" {
		v.Files = trustFiles(spec.TrustBundle)
	}
	v.Protected = append(v.Protected, protected...)
	v.Writable = writable
	v.Pin = pinsFor(append(append([]string{}, protected...), writable...), spec.Access.ReadWrite)
	if spec.Dir != nil {
		var st unix.Stat_t
		if err := unix.Fstat(int(spec.Dir.Fd()), &st); err != nil {
			store.release(checkouts)
			return nil, nil, fmt.Errorf("%w: stat working directory: %w", sandbox.ErrLaunch, err)
		}
		// The view is entered by path; the handle's identity is checked there, so a path
		// that now names something else fails instead of leading elsewhere.
		dir := spec.DirPath
		if dir == "" {
			var err error
			if dir, err = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", spec.Dir.Fd())); err != nil {
				store.release(checkouts)
				return nil, nil, fmt.Errorf("%w: working directory path: %w", sandbox.ErrLaunch, err)
			}
		}
		v.Dir, v.DirDev, v.DirIno = dir, st.Dev, st.Ino
	}
	imageView(v, spec)
	return v, checkouts, nil
}

// trustFiles shows bundle at each of the system CA bundle paths that is a regular file on
// the host, and at the file each one leads to through symlinks (Debian's OpenSSL reads
// /usr/lib/ssl/cert.pem, a link to /etc/ssl/certs/ca-certificates.crt): a program that
// reads any of them, by either path, reads the bundle. Each path is opened once, following
// symlinks, and named by where the kernel says it led (most of the list is absent on any
// one system: one failed lookup each).
func trustFiles(bundle string) []kernel.ViewFile {
	var out []kernel.ViewFile
	seen := map[string]bool{}
	for _, p := range sandbox.SystemCABundles {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		r := ""
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			r, _ = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		}
		unix.Close(fd)
		if r == "" || !filepath.IsAbs(r) || seen[r] {
			continue
		}
		seen[r] = true
		out = append(out, kernel.ViewFile{Path: r, Source: bundle})
	}
	return out
}
