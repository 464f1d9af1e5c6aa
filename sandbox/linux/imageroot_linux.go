// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
)

// maxImageTop bounds the top-level entries of an image root the Landlock rules name.
const maxImageTop = 1024

// checkImageRoot refuses a Root this sandbox cannot show as the root of a view: no view on
// this machine, a relative path, a path overlayfs cannot take as a lower layer (its option
// string separates layers with ":" and options with ","), or something not a directory.
func (s *Sandbox) checkImageRoot(spec *sandbox.Spec) error {
	if spec.Root == "" {
		return nil
	}
	if !s.view {
		return fmt.Errorf("%w (%s)", sandbox.ErrNoImageRoot, s.noViewReason())
	}
	r := spec.Root
	if !filepath.IsAbs(r) || filepath.Clean(r) != r || strings.ContainsAny(r, ",:\\\n") {
		return fmt.Errorf("%w: image root %q: an absolute clean path without , : or \\", sandbox.ErrInvalidSpec, r)
	}
	if spec.RootDir != "" && (!filepath.IsAbs(spec.RootDir) || filepath.Clean(spec.RootDir) != spec.RootDir) {
		return fmt.Errorf("%w: working directory %q in the image: an absolute clean path", sandbox.ErrInvalidSpec, spec.RootDir)
	}
	st, err := os.Lstat(r)
	if err != nil || !st.IsDir() {
		return fmt.Errorf("%w: image root %s is not a directory", sandbox.ErrLaunch, r)
	}
	return nil
}

// implicitReadOnlyFor are the implicit read-only paths of spec: with an image as the root,
// the host's /etc is not shown (the image has its own).
func implicitReadOnlyFor(spec *sandbox.Spec) []string {
	if spec.Root == "" {
		return implicitReadOnly
	}
	out := make([]string, 0, len(implicitReadOnly))
	for _, p := range implicitReadOnly {
		if p != "/etc" {
			out = append(out, p)
		}
	}
	return out
}

// imageRules are the image's own files as paths of the view, for Landlock's read and
// execute rules (opened inside the view, so they name the image's files, never the
// host's): its top-level entries but /proc, /dev and /tmp, which the view covers. An entry
// on the way to a place the spec names (a grant's mount point, a denied path such as the
// config dir under an image's /root) is not named whole, which would cover that place
// too: its own entries are, one level down, and so on. Symlinks are left out: a rule is
// opened through it and could name a granted place with rights the grant did not give;
// what a link such as /lib -> usr/lib leads to is covered by its own entry.
func imageRules(root string, avoid []string) ([]string, error) {
	var out []string
	seen := 0
	var walk func(rel string) error
	walk = func(rel string) error {
		f, err := os.Open(filepath.Join(root, rel))
		if err != nil {
			return nil // gone, or not a directory: nothing of it is named
		}
		ents, err := f.ReadDir(maxImageTop + 1)
		f.Close()
		if err != nil && len(ents) == 0 {
			return nil
		}
		seen += len(ents)
		if seen > maxImageTop {
			return fmt.Errorf("%w: the image root has more than %d entries on the way to the run's grants", sandbox.ErrLaunch, maxImageTop)
		}
		for _, e := range ents {
			if !e.IsDir() && !e.Type().IsRegular() {
				continue
			}
			p := filepath.Join("/", rel, e.Name())
			if rel == "" && (p == "/proc" || p == "/dev" || p == "/tmp") {
				continue
			}
			// at: p is such a place or inside one; on: p leads to one.
			on, at := false, false
			for _, a := range avoid {
				a = filepath.Clean(a)
				at = at || a == p || strings.HasPrefix(p, a+"/")
				on = on || strings.HasPrefix(a, p+"/")
			}
			switch {
			case at:
			case on && e.IsDir():
				if err := walk(filepath.Join(rel, e.Name())); err != nil {
					return err
				}
			case !on:
				out = append(out, p)
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	return out, nil
}

// imageAvoid are the places of spec an image rule must not cover: every path its access
// names (grants, denied paths) and the writable ones the run adds (rw).
func imageAvoid(spec *sandbox.Spec, rw []string) []string {
	a := spec.Access
	out := append(append(append(append([]string{}, a.ReadOnly...), a.ReadExec...), a.Deny...), rw...)
	return append(out, implicitReadOnlyFor(spec)...)
}

// imageView sets the view's root and working directory for a spec with an image root.
func imageView(v *kernel.View, spec *sandbox.Spec) {
	if spec.Root == "" {
		return
	}
	v.Root = spec.Root
	v.Dir, v.DirDev, v.DirIno = spec.RootDir, 0, 0
	if v.Dir == "" {
		v.Dir = "/"
	}
	// The host's resolver configuration, as every plugin has it through /etc: an image's
	// own names a nameserver of the container runtime it was built for (or none), and the
	// network by destination answers the host's.
	if r, err := filepath.EvalSymlinks(hostResolvConf); err == nil {
		if st, err := os.Stat(r); err == nil && st.Mode().IsRegular() {
			v.Files = append(v.Files, kernel.ViewFile{Path: hostResolvConf, Source: r})
		}
	}
}

// hostResolvConf is the resolver configuration shown in an image's view.
const hostResolvConf = "/etc/resolv.conf"
