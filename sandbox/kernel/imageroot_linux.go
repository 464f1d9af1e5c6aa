// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// skelBase is where the skeleton of an image root is made, on the stage (the calling
// thread's root after the first pivot).
const skelBase = "/skel"

// imageRoot mounts v.Root as the view's root (/newroot): a read-only, nosuid, nodev overlay
// of a skeleton of fledge's own over the image. The skeleton holds every mount point the
// view will use (each grant, /tmp, /proc, /dev and its links, the working directory), so
// every later step finds them as directories or files of fledge's making: a symlink the
// image has at one of those paths is covered, never followed (it could lead into
// /oldroot, the host's tree, while the view is being built). Nothing is written into the
// image, and nothing of it is writable in the view. Runs after the first pivot, with the
// host's tree at /oldroot.
func imageRoot(v *View, mounts []ViewMount) error {
	root := filepath.Clean(v.Root)
	if !filepath.IsAbs(root) || root == "/" || strings.ContainsAny(root, ",:\\\n") {
		return fmt.Errorf("image root %q cannot be a lower layer", v.Root)
	}
	if err := unix.Mkdir(skelBase, 0o755); err != nil {
		return fmt.Errorf("image skeleton: %w", err)
	}
	if err := unix.Mount("fledge-skel", skelBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("image skeleton tmpfs: %w", err)
	}
	dir := func(p string) error {
		if err := os.MkdirAll(skelBase+p, 0o755); err != nil {
			return fmt.Errorf("image skeleton: %w", err)
		}
		return nil
	}
	for _, p := range []string{"/tmp", "/proc", "/dev"} {
		if err := dir(p); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := unix.Symlinkat(target, unix.AT_FDCWD, skelBase+"/dev/"+name); err != nil {
			return fmt.Errorf("image skeleton /dev/%s: %w", name, err)
		}
	}
	for _, m := range mounts {
		p := filepath.Clean(m.Path)
		if p == "/" {
			return errors.New("a grant of / cannot lie on an image root")
		}
		st, err := os.Stat("/oldroot" + p)
		if err != nil {
			continue // bindInto skips it too
		}
		if st.IsDir() {
			if err := dir(p); err != nil {
				return err
			}
			continue
		}
		if err := dir(filepath.Dir(p)); err != nil {
			return err
		}
		if err := unix.Mknod(skelBase+p, unix.S_IFREG|0o644, 0); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("image skeleton %s: %w", p, err)
		}
	}
	// The files shown over the image (the host's resolv.conf, a session CA at the system
	// bundle paths) get a file of the skeleton to be shown on, image or not.
	for _, f := range v.Files {
		p := filepath.Clean(f.Path)
		if !filepath.IsAbs(p) || p == "/" {
			continue
		}
		if err := dir(filepath.Dir(p)); err != nil {
			return err
		}
		if err := unix.Mknod(skelBase+p, unix.S_IFREG|0o644, 0); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("image skeleton %s: %w", p, err)
		}
	}
	if d := filepath.Clean(v.Dir); v.Dir != "" && d != "/" {
		if err := dir(d); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + skelBase + ":/oldroot" + root
	if err := unix.Mount("fledge-image", "/newroot", "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("image root overlay: %w", err)
	}
	return nil
}
