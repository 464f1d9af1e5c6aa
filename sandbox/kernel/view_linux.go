// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// A private filesystem view, built the way bubblewrap builds one: a new mount namespace
// whose root is an empty tmpfs holding only bind mounts of what the policy grants,
// read-only unless granted writable, a fresh tmpfs on /tmp, and the protected paths inside
// writable roots bound read-only over themselves. Everything else does not exist in the
// view, so chmod, utime and xattr calls on it fail with ENOENT and `test -e` tells the
// truth — which Landlock, governing access but not metadata, cannot give. Landlock stays
// the second layer on top.
//
// EnterView runs on the thread that forks or execs the child (the launch thread or the
// stub): the mount namespace is per thread after unshare(CLONE_FS|CLONE_NEWNS), and a
// child inherits the thread's. It needs CAP_SYS_ADMIN (root) on that thread.

// ErrView wraps a failure to build the view.
var ErrView = errors.New("private filesystem view")

// viewBase is where the view is assembled inside the new namespace, before it becomes the
// root; any directory that exists everywhere will do (it is covered by a tmpfs there).
const viewBase = "/tmp"

// EnterView builds v in a new mount namespace of the calling thread and makes it the
// thread's root and cwd. dirfd (-1: none) is the guarded handle of v.Dir: the directory is
// taken from the handle, never by re-resolving the path (a path swapped for a symlink
// after the guard checked it cannot redirect the command). The caller holds
// runtime.LockOSThread and lets the thread die afterwards (or execs).
func EnterView(v *View, dirfd int) error {
	if err := enterView(v, dirfd, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrView, err)
	}
	return nil
}

// enterView builds v; with tmpl set it builds a template instead (see BuildTemplate): it
// records the namespace and its /tmp, and leaves /tmp writable for the runs' mount points.
func enterView(v *View, dirfd int, tmpl *Template) error {
	// A detached copy of the handle's mount, rooted at its directory, taken while the
	// handle's mount is still in this thread's namespace (open_tree refuses foreign ones).
	tree := -1
	var dirNow string // where the handle's directory is right now (it may have moved)
	if dirfd >= 0 && v.Dir != "" && v.Root == "" {
		fd, err := unix.OpenTree(dirfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("clone working directory: %w", err)
		}
		tree = fd
		defer unix.Close(tree)
		if err := noDevices(tree, ""); err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		dirNow, _ = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", dirfd))
	}
	// The files shown in the view, taken like the working directory, in this namespace.
	files, err := openFiles(v.Files)
	if err != nil {
		return err
	}
	defer closeFDs(files)
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if tmpl != nil {
		fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("template namespace: %w", err)
		}
		tmpl.ns = fd
	}
	// Nothing done here may propagate back to the host's mounts.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// Stage: a tmpfs holding newroot (another tmpfs) and oldroot (the host's tree after
	// the first pivot), so sources are reached as /oldroot/... even under /tmp.
	if err := unix.Mount("fledge-stage", viewBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("stage tmpfs: %w", err)
	}
	for _, d := range []string{"newroot", "oldroot"} {
		if err := unix.Mkdir(viewBase+"/"+d, 0o755); err != nil {
			return fmt.Errorf("stage: %w", err)
		}
	}
	if err := unix.Mount("fledge-root", viewBase+"/newroot", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	if err := unix.Chdir(viewBase); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "oldroot"); err != nil {
		return fmt.Errorf("pivot_root (stage): %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}

	mounts := append([]ViewMount{}, v.Mounts...)
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Path < mounts[j].Path })
	if v.Root != "" {
		if err := imageRoot(v, mounts); err != nil {
			return err
		}
	}
	var done []ViewMount
	tmpDone := false
	for _, m := range mounts {
		p := filepath.Clean(m.Path)
		if p == "/proc" && v.ProcTree > 2 {
			continue // the run's own procfs goes there instead (below)
		}
		if !tmpDone && (p == "/tmp" || strings.HasPrefix(p, "/tmp/") || p > "/tmp") {
			// The private /tmp goes under every grant beneath it.
			if err := mkdirAll("/newroot/tmp"); err != nil {
				return err
			}
			if err := unix.Mount("fledge-tmp", "/newroot/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
				return fmt.Errorf("private /tmp: %w", err)
			}
			tmpDone = true
		}
		if coveredView(v, done, m) {
			continue
		}
		userns := -1
		if hidesRoot(v, m) {
			userns = v.IDMap
		}
		ok, err := bindInto(p, m.Writable, userns)
		if err != nil {
			return err
		}
		if ok {
			done = append(done, ViewMount{Path: p, Writable: m.Writable, System: m.System})
		}
	}
	if !tmpDone {
		if err := mkdirAll("/newroot/tmp"); err != nil {
			return err
		}
		if err := unix.Mount("fledge-tmp", "/newroot/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("private /tmp: %w", err)
		}
	}
	if v.ProcTree > 2 {
		if err := attachProc(v.ProcTree); err != nil {
			return err
		}
	}
	// The /dev symlinks programs expect (bash process substitution opens /dev/fd/N), as
	// bubblewrap makes them; they lead into /proc/self, which is the process's own.
	if err := mkdirAll("/newroot/dev"); err != nil {
		return err
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := unix.Symlinkat(target, unix.AT_FDCWD, "/newroot/dev/"+name); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
	}
	// A working directory outside every grant (Landlock let a command sit in a directory
	// it could not read) becomes an empty placeholder: it grants nothing.
	placeholder := false
	cwdfd := -1
	if v.Dir != "" && !covered(done, filepath.Clean(v.Dir), false) {
		if err := mkdirAll("/newroot" + filepath.Clean(v.Dir)); err != nil {
			return err
		}
		placeholder = true
	} else if tree >= 0 {
		// The guarded directory itself is mounted where its path leads in the view, with
		// the rights of the grant that covers it, and becomes the cwd through an fd, so
		// wherever a racing rename or symlink swap makes the path lead, the command runs
		// in the directory the guard proved, inside the view.
		var err error
		if dirHidesRoot(v) {
			if err := idmapTree(tree, v.IDMap); err != nil {
				return fmt.Errorf("working directory: %w", err)
			}
		}
		where := func() []string {
			// Where the handle's directory is now, asked again on every attempt.
			now, _ := os.Readlink(fmt.Sprintf("/oldroot/proc/self/fd/%d", dirfd))
			return []string{now, dirNow, v.Dir}
		}
		if cwdfd, err = mountDir(tree, where, v); err != nil {
			return err
		}
		if !covered(done, filepath.Clean(v.Dir), true) {
			if err := unix.MountSetattr(cwdfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE,
				&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}); err != nil {
				return fmt.Errorf("read-only working directory: %w", err)
			}
		}
	}
	if v.ProcNew {
		// Before the host's tree is detached: the kernel lets a user namespace mount proc
		// only while a fully visible proc is still in its mount namespace.
		if err := mountProc("/newroot/proc"); err != nil {
			return err
		}
	}
	// Whichever procfs the view has (the run's, or the host's bound): root's own files in it
	// stay root's (procmask_linux.go).
	if err := maskProc("/newroot/proc", "/proc-cover", v.ProcMask); err != nil {
		return err
	}
	if err := protect("/newroot", v, "/"); err != nil {
		return err
	}
	// Last, so no grant, working directory or protected path mounted there covers them.
	if err := attachFiles("/newroot", v.Files, files, "/"); err != nil {
		return err
	}
	// A pin or protected mount at or above the working directory's mount covers it: the
	// command must sit in the covering copy, which carries them, not in the shadowed mount
	// beneath (where .git/config would be writable again). Same directory, by identity.
	if cwdfd >= 0 && len(v.Pin)+len(v.Protected)+len(v.Writable) > 0 {
		fd, err := coveringCwd(cwdfd)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		cwdfd = fd
	}

	// The private /tmp only holds mount points: it is read-only like Landlock had it
	// (TMPDIR is the run's own writable directory, bound beneath it). A template's stays
	// writable for the host, which makes the runs' mount points in it; each run makes its
	// own copy read-only.
	if tmpl == nil {
		if err := unix.Mount("", "/newroot/tmp", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("read-only /tmp: %w", err)
		}
	}
	// The view becomes the root; the stage and the host's tree are detached.
	if err := unix.Chdir("/newroot"); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root (view): %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host tree: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// The root tmpfs itself (the directories leading to the grants) is read-only.
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("read-only root: %w", err)
	}
	if tmpl != nil {
		fd, err := unix.Open("/tmp", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("template /tmp: %w", err)
		}
		tmpl.tmp = fd
		return nil
	}
	if err := freshMqueue(""); err != nil {
		return err
	}
	return enterDir(cwdfd, v, !placeholder)
}

// enterDir makes the working directory the mounted handle cwdfd, or else v.Dir by path,
// checked to be the guarded directory (unless it is a placeholder), or else "/".
func enterDir(cwdfd int, v *View, checkID bool) error {
	if cwdfd >= 0 {
		if err := unix.Fchdir(cwdfd); err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		return nil
	}
	if v.Dir == "" {
		return unix.Chdir("/")
	}
	if err := unix.Chdir(v.Dir); err != nil {
		return fmt.Errorf("working directory %s is not in the view: %w", v.Dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(".", &st); err != nil {
		return err
	}
	if checkID && (v.DirDev != 0 || v.DirIno != 0) && (st.Dev != v.DirDev || st.Ino != v.DirIno) {
		return fmt.Errorf("working directory %s changed identity in the view", v.Dir)
	}
	return nil
}

// protect makes v's pinned directories, protected paths and writable re-binds beneath
// under (inside the view rooted at prefix) mount points of their own: the protected ones
// read-only, the writable ones writable again on top of a read-only one. They are made
// parents first, so a path's rights are those of the deepest entry at or above it.
func protect(prefix string, v *View, under string) error {
	for _, e := range protectOrder(v) {
		p := e.path
		if under != "/" && p != under && !strings.HasPrefix(p, under+"/") {
			continue
		}
		dst := prefix + p
		st, err := os.Lstat(dst)
		if err != nil || (e.kind == mountPin && !st.IsDir()) {
			continue
		}
		if err := unix.Mount(dst, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("%s %s: %w", e.kind, p, err)
		}
		switch e.kind {
		case mountReadOnly:
			if err := readOnly(dst); err != nil {
				return fmt.Errorf("protect %s: %w", p, err)
			}
		case mountWritable:
			if !grantedWritable(v, p) {
				break // a read-only grant covers it: it stays read-only
			}
			// Only the new mount itself: read-only grants and protected paths beneath it
			// keep their own flags.
			if err := unix.MountSetattr(-1, dst, 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); err != nil {
				return fmt.Errorf("writable %s: %w", p, err)
			}
		}
	}
	return nil
}

// grantedWritable: the deepest grant at or above p is a writable one.
func grantedWritable(v *View, p string) bool {
	best, w := "", false
	for _, m := range v.Mounts {
		mp := filepath.Clean(m.Path)
		if (mp == p || isBeneath(p, mp)) && len(mp) >= len(best) {
			if len(mp) > len(best) {
				w = false
			}
			best, w = mp, w || m.Writable
		}
	}
	return w
}

type mountKind string

const (
	mountPin      mountKind = "pin"
	mountReadOnly mountKind = "protect"
	mountWritable mountKind = "writable"
)

type protectEntry struct {
	path string
	kind mountKind
}

// protectOrder is v's pins, protected paths and writable re-binds, parents first; a path
// listed as more than one is protected (read-only wins), else writable.
func protectOrder(v *View) []protectEntry {
	kinds := map[string]mountKind{}
	set := func(paths []string, k mountKind) {
		for _, p := range paths {
			p = filepath.Clean(p)
			if was, ok := kinds[p]; !ok || was == mountPin || (was == mountWritable && k == mountReadOnly) {
				kinds[p] = k
			}
		}
	}
	set(v.Pin, mountPin)
	set(v.Writable, mountWritable)
	set(v.Protected, mountReadOnly)
	out := make([]protectEntry, 0, len(kinds))
	for p, k := range kinds {
		out = append(out, protectEntry{p, k})
	}
	// A parent is a prefix of its children, so it sorts before them.
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// readOnlyAt: the deepest protected or writable entry at or above p is a protected one (p
// lies in a read-only protected directory).
func readOnlyAt(v *View, p string) bool {
	best, ro := "", false
	for _, e := range protectOrder(v) {
		if e.kind == mountPin || (e.path != p && !isBeneath(p, e.path)) {
			continue
		}
		if len(e.path) >= len(best) {
			best, ro = e.path, e.kind == mountReadOnly
		}
	}
	return ro
}

// attachProc mounts a copy of the detached procfs tree at /newroot/proc.
func attachProc(tree int) error {
	if err := mkdirAll("/newroot/proc"); err != nil {
		return err
	}
	fd, err := unix.OpenTree(tree, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("copy procfs: %w", err)
	}
	defer unix.Close(fd)
	// Read-only like the host's /proc was: a command cannot write /proc/self/* (comm,
	// oom_score_adj, attr) or /proc/sys, whatever its capabilities.
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}); err != nil {
		return fmt.Errorf("read-only procfs: %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, "/newroot/proc", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount procfs: %w", err)
	}
	return nil
}

// mountProc mounts a fresh proc of the calling thread's pid namespace at dst, read-only
// like the host's /proc bind it replaces.
func mountProc(dst string) error {
	if err := mkdirAll(dst); err != nil {
		return err
	}
	if err := unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// mountAttempts bounds the retries of mountDir while a path keeps changing under it.
const mountAttempts = 256

// mountDir attaches the detached tree at the first candidate path that is a directory in
// the view and returns the tree's fd (now the mounted directory, checked to be the
// handle's; the caller closes tree).
func mountDir(tree int, candidates func() []string, v *View) (int, error) {
	fd, _, err := mountDirAt("/newroot", tree, candidates, v)
	return fd, err
}

// mountDirAt is mountDir into the view rooted at prefix ("" once it is the root).
// It also returns the path (in the view) where the tree went.
func mountDirAt(prefix string, tree int, candidates func() []string, v *View) (int, string, error) {
	var last error = errors.New("no candidate path")
	for i := 0; i < mountAttempts; i++ {
		cs := candidates()
		c := cs[i%len(cs)]
		if c == "" || !filepath.IsAbs(c) {
			continue
		}
		dst := prefix + filepath.Clean(c)
		if st, err := os.Stat(dst); err != nil || !st.IsDir() {
			last = fmt.Errorf("%s is not a directory in the view", c)
			continue
		}
		if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			last = err
			continue
		}
		// The tree's fd is now the attached mount's root: the proven directory, wherever
		// its path has moved since.
		var st unix.Stat_t
		if err := unix.Fstat(tree, &st); err != nil || ((v.DirDev != 0 || v.DirIno != 0) && (st.Dev != v.DirDev || st.Ino != v.DirIno)) {
			return -1, "", fmt.Errorf("working directory %s changed identity in the view", v.Dir)
		}
		return tree, filepath.Clean(c), nil
	}
	return -1, "", fmt.Errorf("working directory %s: %w", v.Dir, last)
}

// covered: p is already visible with at least the wanted rights through an earlier mount.
func covered(done []ViewMount, p string, writable bool) bool {
	for _, d := range done {
		if (p == d.Path || strings.HasPrefix(p, d.Path+"/") || d.Path == "/") && (d.Writable || !writable) {
			return true
		}
	}
	return false
}

// bindInto binds /oldroot/p at /newroot/p (false when p does not exist), through the
// idmapping userns when it is not -1 (see rootonly_linux.go).
func bindInto(p string, writable bool, userns int) (bool, error) {
	src, dst := "/oldroot"+p, "/newroot"+p
	st, err := os.Stat(src)
	if err != nil {
		// Missing, or not reachable by this user (an unprivileged fledge given a PATH entry
		// under another user's home): nothing to show, as Landlock skips it too.
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, os.ErrPermission) {
			return false, nil
		}
		return false, fmt.Errorf("grant %s: %w", p, err)
	}
	if st.IsDir() {
		if err := mkdirAll(dst); err != nil {
			return false, err
		}
	} else {
		if err := mkdirAll(filepath.Dir(dst)); err != nil {
			return false, err
		}
		// mknod, not open(O_CREAT|O_WRONLY)+close: a file opened for writing on the root
		// tmpfs holds a write reference on that mount, and making "/" read-only at the end
		// fails with EBUSY while any exists. On the thread launcher the fd would sit in the
		// host's shared fd table, where another launch thread's fork (a child between fork
		// and exec) or its unshare(CLONE_FILES) copies it and keeps the file open after our
		// close, so the remount failed whenever launches ran concurrently. mknod creates
		// the mount point without ever opening it.
		if err := unix.Mknod(dst, unix.S_IFREG|0o644, 0); err != nil && !errors.Is(err, unix.EEXIST) {
			return false, fmt.Errorf("mount point %s: %w", p, err)
		}
	}
	if userns >= 0 {
		return true, bindSystem(p, userns)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return false, fmt.Errorf("bind %s: %w", p, err)
	}
	if !harmlessDevice(p, st) {
		if err := noDevices(-1, dst); err != nil {
			return false, fmt.Errorf("%s: %w", p, err)
		}
	}
	if !writable {
		if err := readOnly(dst); err != nil {
			return false, fmt.Errorf("read-only %s: %w", p, err)
		}
	}
	return true, nil
}

// coveringCwd opens the working directory again by the path it is mounted at, through the
// mounts made on top since, and checks it is the same directory.
func coveringCwd(cwdfd int) (int, error) {
	at, err := os.Readlink(fmt.Sprintf("/oldroot/proc/thread-self/fd/%d", cwdfd))
	if err != nil {
		return -1, fmt.Errorf("working directory: %w", err)
	}
	return reopenCwd(cwdfd, at)
}

// reopenCwd opens the directory at path (through every mount on top) and checks it is
// cwdfd's.
func reopenCwd(cwdfd int, at string) (int, error) {
	fd, err := unix.Open(at, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("working directory: %w", err)
	}
	var was, now unix.Stat_t
	if unix.Fstat(cwdfd, &was) != nil || unix.Fstat(fd, &now) != nil || was.Dev != now.Dev || was.Ino != now.Ino {
		unix.Close(fd)
		return -1, fmt.Errorf("working directory %s changed identity in the view", at)
	}
	return fd, nil
}

// openFiles takes a detached copy of the mount of each file's source (open_tree, in the
// calling thread's mount namespace: it refuses a foreign one), read-only, nosuid, nodev,
// noexec, to be attached once by attachFiles. The caller closes them (closeFDs).
func openFiles(files []ViewFile) ([]int, error) {
	if len(files) == 0 {
		return nil, nil
	}
	fds := make([]int, 0, len(files))
	for _, f := range files {
		fd, err := unix.OpenTree(unix.AT_FDCWD, f.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("file %s: %w", f.Source, err)
		}
		fds = append(fds, fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			closeFDs(fds)
			return nil, fmt.Errorf("file %s is not a regular file", f.Source)
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{
			Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}); err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("read-only %s: %w", f.Source, err)
		}
	}
	return fds, nil
}

// attachFiles attaches each of fds (openFiles of files) over the regular file at its path
// in the view rooted at prefix, for the paths at or beneath under. The path is looked up
// beneath the view's root refusing every symlink, so it cannot lead anywhere the host did
// not resolve it to; one that is not a regular file there is skipped.
func attachFiles(prefix string, files []ViewFile, fds []int, under string) error {
	if len(fds) == 0 {
		return nil
	}
	root, err := unix.Open(prefix+"/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("view root: %w", err)
	}
	defer unix.Close(root)
	for i, f := range files {
		p := filepath.Clean(f.Path)
		if !filepath.IsAbs(p) || p == "/" || (p != under && !isBeneath(p, under)) {
			continue
		}
		dst, err := unix.Openat2(root, p[1:], &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) ||
				errors.Is(err, unix.EACCES) || errors.Is(err, unix.EXDEV) {
				continue
			}
			return fmt.Errorf("file %s: %w", p, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(dst, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(dst)
			continue
		}
		err = unix.MoveMount(fds[i], "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(dst)
		if err != nil {
			return fmt.Errorf("show %s at %s: %w", f.Source, p, err)
		}
	}
	return nil
}

// filesBeneath: a file of v lies at or beneath one of dirs.
func filesBeneath(v *View, dirs ...string) bool {
	for _, f := range v.Files {
		p := filepath.Clean(f.Path)
		for _, d := range dirs {
			if d != "" && (p == filepath.Clean(d) || isBeneath(p, filepath.Clean(d))) {
				return true
			}
		}
	}
	return false
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// readOnly makes the mount at dst and every mount beneath it read-only (nosuid too).
func readOnly(dst string) error {
	return unix.MountSetattr(-1, dst, unix.AT_RECURSIVE,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID})
}

func mkdirAll(p string) error {
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	return nil
}

// ViewSupported reports whether this process can build views: it needs CAP_SYS_ADMIN
// (root), and is probed on a throwaway thread by the caller.
func ViewSupported() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0
}
