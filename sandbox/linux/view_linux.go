package linux

import (
	"fmt"
	"os"

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
	add(implicitReadOnly, false)
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
	return v, checkouts, nil
}
