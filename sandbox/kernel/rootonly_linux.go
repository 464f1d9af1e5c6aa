// SPDX-License-Identifier: MIT

package kernel

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// System paths as an ordinary user sees them. A process of a root fledge keeps uid 0 after
// its capabilities are dropped, and the owner's permission bits need no capability: a
// 0600 root file (a TLS key a package put under /etc, /etc/mysql/debian.cnf, a WireGuard
// config, k3s.yaml) and a 0700 root directory are open to it, whatever their names. So the
// view shows the system paths (ViewMount.System) through an idmapped mount whose mapping
// (View.IDMap, a user namespace) shows root's uid and gid as 65534: for the command every
// root-owned file is someone else's, and only the bits for others apply, exactly what an
// ordinary user gets. Nothing is walked or listed; a file made or chmod'ed later is judged
// by its bits at the time of access. The mounts are read-only anyway, so no write ever
// lands on disk with a mapped owner.

// idmapTree turns the detached mount tree fd into an idmapped, read-only, nosuid, nodev
// one (nodev_linux.go).
func idmapTree(tree, userns int) error {
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns),
	}); err != nil {
		return fmt.Errorf("idmap: %w", err)
	}
	return nil
}

// IDMapSupported says whether path (and every mount beneath it) can be shown through the
// idmapping userns: the filesystem must support idmapped mounts (ext4, xfs, btrfs, tmpfs
// do; overlayfs and procfs do not). Nothing is mounted: the detached copy is dropped.
func IDMapSupported(path string, userns int) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(tree)
	if err := idmapTree(tree, userns); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// bindSystem attaches an idmapped read-only copy of /oldroot/p at /newroot/p (the mount
// point exists).
func bindSystem(p string, userns int) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, "/oldroot"+p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("bind %s: %w", p, err)
	}
	defer unix.Close(tree)
	if err := idmapTree(tree, userns); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, "/newroot"+p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind %s: %w", p, err)
	}
	return nil
}

// hidesRoot: m is shown through v's idmapping.
func hidesRoot(v *View, m ViewMount) bool {
	return m.System && !m.Writable && v.IDMap > 2
}

// coveredView is covered() for the view's grants: a grant that is not a system path (a
// read-only project under /opt) is never covered by an idmapped system mount, which would
// hide its root-owned files; it gets a mount of its own on top.
func coveredView(v *View, done []ViewMount, m ViewMount) bool {
	p := filepath.Clean(m.Path)
	if !covered(done, p, m.Writable) {
		return false
	}
	if hidesRoot(v, m) || v.IDMap <= 2 {
		return true
	}
	// The deepest mount covering p decides what p shows.
	best := ViewMount{Path: ""}
	for _, d := range done {
		if (p == d.Path || strings.HasPrefix(p, d.Path+"/") || d.Path == "/") && len(d.Path) >= len(best.Path) {
			best = d
		}
	}
	return !hidesRoot(v, best)
}

// dirHidesRoot: the grant that covers the working directory (the deepest) is a system
// path shown through the idmapping, so the directory's own mount must be too.
func dirHidesRoot(v *View) bool {
	if v.Dir == "" || v.IDMap <= 2 {
		return false
	}
	dir := filepath.Clean(v.Dir)
	var best *ViewMount
	for i := range v.Mounts {
		m := &v.Mounts[i]
		p := filepath.Clean(m.Path)
		if dir == p || isBeneath(dir, p) {
			if best == nil || len(p) > len(filepath.Clean(best.Path)) || (len(p) == len(filepath.Clean(best.Path)) && m.Writable) {
				best = m
			}
		}
	}
	return best != nil && hidesRoot(v, *best)
}
