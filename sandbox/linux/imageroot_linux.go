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

// imageTop are the image's top-level entries as paths of the view (where Landlock gives
// them read and execute; the rules are opened inside the view, so they name the image's
// files, never the host's): everything but /proc, /dev and /tmp, which the view covers.
func imageTop(root string) ([]string, error) {
	f, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("%w: image root: %w", sandbox.ErrLaunch, err)
	}
	defer f.Close()
	ents, err := f.ReadDir(maxImageTop + 1)
	if err != nil && len(ents) == 0 {
		return nil, nil
	}
	if len(ents) > maxImageTop {
		return nil, fmt.Errorf("%w: image root has more than %d top-level entries", sandbox.ErrLaunch, maxImageTop)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		// A symlink is left out: its rule would be opened through it, inside the view, and
		// could name a granted place (the data dir) with rights the grant did not give.
		// What a link such as /lib -> usr/lib leads to is covered by its own entry.
		if !e.IsDir() && !e.Type().IsRegular() {
			continue
		}
		switch e.Name() {
		case "proc", "dev", "tmp":
			continue
		}
		out = append(out, "/"+e.Name())
	}
	return out, nil
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
}
