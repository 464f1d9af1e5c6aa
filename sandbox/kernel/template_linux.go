// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A view template: the part of a private filesystem view that is the same for every run of
// a session (the grants, the system paths, /dev, /proc, the protected paths), built once in
// a mount namespace of its own and kept by an fd. A run then enters a copy of it (setns to
// the template, unshare for a private copy: one syscall copies the dozen mounts) and adds
// only what is its own: its working directory and its TMPDIR. Building the view afresh
// per run (two tmpfs, a bind and a setattr per grant, two pivot_roots, and the teardown of
// a copy of the host's mount table) is most of what the view costs a short exec.
//
// A template holds the mounts of the paths it was built from: a grant replaced on disk
// afterwards (removed and made again) is not the one in the template, so the caller checks
// the grants' identities before each use and builds a new template when one changed.

// ErrTemplateUnfit: this run cannot use the template (the caller builds its view afresh).
var ErrTemplateUnfit = errors.New("view template does not fit this run")

// Template is a built view template.
type Template struct {
	ns      int // the template's mount namespace
	tmp     int // its /tmp (the private tmpfs), where runs' TMPDIR mount points are made
	entered atomic.Int64
}

// Entered counts the runs that entered a copy of t.
func (t *Template) Entered() int64 { return t.entered.Load() }

// BuildTemplate builds v's run-independent part (v.Dir and v.RunTmp are ignored) as a
// template. Like EnterView it needs CAP_SYS_ADMIN; it must run on a throwaway locked
// thread that does not share its fd table privately (the template's fds stay with the
// process), which the caller lets die afterwards.
func BuildTemplate(v *View) (*Template, error) {
	if !templateFits(v) {
		return nil, ErrTemplateUnfit
	}
	base := *v
	base.Dir, base.DirDev, base.DirIno, base.RunTmp = "", 0, 0, ""
	base.Mounts = nil
	for _, m := range v.Mounts {
		if filepath.Clean(m.Path) != filepath.Clean(v.RunTmp) || v.RunTmp == "" {
			base.Mounts = append(base.Mounts, m)
		}
	}
	t := &Template{ns: -1, tmp: -1}
	if err := enterView(&base, -1, t); err != nil {
		t.Close()
		return nil, fmt.Errorf("%w: template: %w", ErrView, err)
	}
	return t, nil
}

// templateFits: the run's TMPDIR lies directly in /tmp, which is the view's private tmpfs
// (no grant covers /tmp itself).
func templateFits(v *View) bool {
	if v.Root != "" {
		return false // an image root is built afresh for each run
	}
	if v.RunTmp != "" && filepath.Dir(filepath.Clean(v.RunTmp)) != "/tmp" {
		return false
	}
	for _, m := range v.Mounts {
		if p := filepath.Clean(m.Path); p == "/" || p == "/tmp" {
			return false
		}
	}
	return true
}

// Close releases the template (its namespace goes once no run uses a copy).
func (t *Template) Close() {
	for _, fd := range []*int{&t.ns, &t.tmp} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// RemoveRunTmp removes the mount point EnterTemplate made for a run's TMPDIR (after the
// run; the run's copies of the namespace drop their mount with it).
func (t *Template) RemoveRunTmp(runTmp string) error {
	if runTmp == "" || t.tmp < 0 {
		return nil
	}
	err := unix.Unlinkat(t.tmp, filepath.Base(runTmp), unix.AT_REMOVEDIR)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("view template: remove %s: %w", runTmp, err)
	}
	return nil
}

// EnterTemplate gives the calling thread a private copy of t with v's own parts added: its
// TMPDIR (v.RunTmp) bound writable at its path, and its working directory (dirfd, the
// guarded handle of v.Dir) mounted at its path with the rights of the grant covering it,
// the protected paths beneath it made read-only again, and entered. The same rules as
// EnterView apply (locked thread, CLONE_FS unshared by the caller or here, thread dies
// after the fork). v must be the view t was built from. ErrTemplateUnfit means nothing was
// changed and the caller should use EnterView.
func EnterTemplate(t *Template, v *View, dirfd int) error {
	if err := enterTemplate(t, v, dirfd); err != nil {
		if errors.Is(err, ErrTemplateUnfit) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrView, err)
	}
	t.entered.Add(1)
	return nil
}

func enterTemplate(t *Template, v *View, dirfd int) error {
	r, err := PrepareRunMounts(t, v, dirfd)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	// The way back: a working directory the template copy cannot mount (its path keeps
	// changing under a racing rename) is left to a fresh view, which follows the handle.
	host, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("host namespace: %w", err)
	}
	defer unix.Close(host)
	if err := unix.Setns(t.ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter template: %w", err)
	}
	// A private copy: what this run mounts stays its own.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("copy template: %w", err)
	}
	return enterRunMounts(v, r, host)
}

// RunMounts are a run's own parts of a template copy (its working directory and TMPDIR),
// taken as detached mount trees in the host's mount namespace, where their paths lie, so
// that a thread in a copy of the template (the launch thread, or the session's launcher
// process, which never sees the host's tree) can mount them. Close releases them.
type RunMounts struct {
	Tree     int    // detached copy of the working directory's tree (-1: none)
	DirNow   string // the working directory's path as the host saw it
	Writable bool   // a writable grant covers the working directory
	Files    []int  // v.Files, opened when the working directory covers one of them
	TmpTree  int    // detached copy of the run's TMPDIR (-1: none)
}

// Close closes the trees and files.
func (r *RunMounts) Close() {
	for _, fd := range []*int{&r.Tree, &r.TmpTree} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	closeFDs(r.Files)
	r.Files = nil
}

// FDs lists r's descriptors in a fixed order (Tree, TmpTree, Files) for passing them to
// another process; RunMountsFrom takes them back in that order.
func (r *RunMounts) FDs() []int {
	var out []int
	for _, fd := range []int{r.Tree, r.TmpTree} {
		if fd >= 0 {
			out = append(out, fd)
		}
	}
	return append(out, r.Files...)
}

// RunMountsFrom rebuilds r's descriptors from fds (received in FDs's order): hasTree and
// hasTmp say which of the first two are there, the rest are Files.
func RunMountsFrom(dirNow string, writable, hasTree, hasTmp bool, fds []int) (*RunMounts, error) {
	r := &RunMounts{Tree: -1, TmpTree: -1, DirNow: dirNow, Writable: writable}
	take := func() (int, error) {
		if len(fds) == 0 {
			return -1, errors.New("run mounts: descriptor missing")
		}
		fd := fds[0]
		fds = fds[1:]
		return fd, nil
	}
	var err error
	if hasTree {
		if r.Tree, err = take(); err != nil {
			return nil, err
		}
	}
	if hasTmp {
		if r.TmpTree, err = take(); err != nil {
			r.Close()
			return nil, err
		}
	}
	r.Files = fds
	return r, nil
}

// PrepareRunMounts takes, in the host's mount namespace, what a run adds to a copy of t:
// the detached copies of its working directory (dirfd, the guarded handle of v.Dir; with
// the system paths' idmapping where the view hides root's files) and TMPDIR, and the
// mount point of the latter in the template's tmpfs. ErrTemplateUnfit: nothing was done.
func PrepareRunMounts(t *Template, v *View, dirfd int) (*RunMounts, error) {
	if !templateFits(v) {
		return nil, ErrTemplateUnfit
	}
	dir := filepath.Clean(v.Dir)
	writable, grantedDir := templateDirGrant(v, dir)
	if !grantedDir {
		return nil, ErrTemplateUnfit // a placeholder working directory: only a fresh view makes it
	}
	r := &RunMounts{Tree: -1, TmpTree: -1, Writable: writable}
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	// The detached copies are taken in the host's namespace, before leaving it.
	var err error
	if r.Tree, r.DirNow, err = cloneWorkDir(v, dirfd); err != nil {
		return nil, err
	}
	if r.Tree >= 0 && dirHidesRoot(v) {
		if err := idmapTree(r.Tree, v.IDMap); err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
	}
	// The working directory's tree, mounted on the template's, covers the files the
	// template shows beneath it: they are shown again on top of it (rarely: a run whose
	// working directory holds the system CA bundle).
	if r.Tree >= 0 && filesBeneath(v, dir, r.DirNow) {
		if r.Files, err = openFiles(v.Files); err != nil {
			return nil, err
		}
	}
	if r.TmpTree, err = cloneRunTmp(t, v); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// NoteEntered counts a run that entered a copy of t elsewhere (a session's launcher).
func (t *Template) NoteEntered() { t.entered.Add(1) }

// EnterRunMounts mounts r into the calling thread's mount namespace, which must be a
// private copy of the template r was prepared for (the launcher's threads), and enters the
// working directory: the same steps EnterTemplate takes after its copy.
func EnterRunMounts(v *View, r *RunMounts) error {
	if err := enterRunMounts(v, r, -1); err != nil {
		return fmt.Errorf("%w: %w", ErrView, err)
	}
	return nil
}

// enterRunMounts is EnterTemplate's second half, on a thread in a private copy of the
// template: TMPDIR, working directory, read-only /tmp, the IPC namespace's mqueue, cwd.
// host (-1: none) is the namespace to go back to when the working directory cannot be
// mounted (ErrTemplateUnfit); without one that is an error.
func enterRunMounts(v *View, r *RunMounts, host int) error {
	if r.TmpTree >= 0 {
		if err := unix.MoveMount(r.TmpTree, "", unix.AT_FDCWD, filepath.Clean(v.RunTmp), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount TMPDIR: %w", err)
		}
	}
	cwdfd := -1
	if r.Tree >= 0 {
		fd, reopened, err := mountTemplateDir(v, r.Tree, r.DirNow, r.Writable, r.Files, host)
		if err != nil {
			return err
		}
		if reopened {
			defer unix.Close(fd)
		}
		cwdfd = fd
	}
	if err := unix.Mount("", "/tmp", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("read-only /tmp: %w", err)
	}
	if err := freshMqueue(""); err != nil {
		return err
	}
	return enterDir(cwdfd, v, true)
}

// templateDirGrant reports whether a grant (other than the run's TMPDIR) covers the
// working directory dir, and whether any such grant is writable.
func templateDirGrant(v *View, dir string) (writable, granted bool) {
	granted = v.Dir == ""
	for _, m := range v.Mounts {
		p := filepath.Clean(m.Path)
		if v.Dir != "" && (dir == p || isBeneath(dir, p)) && (v.RunTmp == "" || p != filepath.Clean(v.RunTmp)) {
			granted = true
			writable = writable || m.Writable
		}
	}
	return writable, granted
}

// cloneWorkDir takes a detached copy of the working directory's tree (-1 when there is
// none to mount) and reads its current path while this thread still sees the host's /proc.
// The caller closes the copy.
func cloneWorkDir(v *View, dirfd int) (tree int, dirNow string, _ error) {
	if dirfd < 0 || v.Dir == "" {
		return -1, "", nil
	}
	fd, err := unix.OpenTree(dirfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return -1, "", fmt.Errorf("clone working directory: %w", err)
	}
	if err := noDevices(fd, ""); err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("working directory: %w", err)
	}
	dirNow, _ = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", dirfd))
	return fd, dirNow, nil
}

// cloneRunTmp takes a detached copy of the run's TMPDIR (-1 when it has none) and makes
// its mount point in the template's tmpfs. The caller closes the copy.
func cloneRunTmp(t *Template, v *View) (int, error) {
	if v.RunTmp == "" {
		return -1, nil
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, v.RunTmp, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("clone TMPDIR: %w", err)
	}
	if err := noDevices(fd, ""); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TMPDIR: %w", err)
	}
	// Its mount point in the template's tmpfs (shared by every copy; the host removes
	// it after the run).
	if err := unix.Mkdirat(t.tmp, filepath.Base(v.RunTmp), 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		unix.Close(fd)
		return -1, fmt.Errorf("TMPDIR mount point: %w", err)
	}
	return fd, nil
}

// mountTemplateDir mounts the working directory's tree in the template copy with its
// grant's rights, protects again what lies beneath it and returns the handle to enter.
// reopened says the handle is a new one the caller must close once entered. A tree it
// cannot mount takes the thread back to the host's namespace (host) and is
// ErrTemplateUnfit.
func mountTemplateDir(v *View, tree int, dirNow string, writable bool, files []int, host int) (cwdfd int, reopened bool, err error) {
	// The path only: this thread's /proc is the view's now (maybe another pid
	// namespace's), so the handle's current path was read before.
	var where string
	if cwdfd, where, err = mountDirAt("", tree, func() []string { return []string{dirNow, v.Dir} }, v); err != nil {
		if host < 0 {
			// A launcher's thread has no host namespace to go back to: the caller
			// launches the run afresh elsewhere (its path kept changing under it).
			return -1, false, fmt.Errorf("%w: %w", ErrTemplateUnfit, err)
		}
		if serr := unix.Setns(host, unix.CLONE_NEWNS); serr != nil {
			return -1, false, fmt.Errorf("%w (and back to the host's namespace: %w)", err, serr)
		}
		return -1, false, ErrTemplateUnfit
	}
	// A working directory inside a protected directory (below its mount point, which
	// the template has): read-only as the template has it there.
	if !writable || readOnlyAt(v, where) {
		if err := unix.MountSetattr(cwdfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE,
			&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}); err != nil {
			return -1, false, fmt.Errorf("read-only working directory: %w", err)
		}
	}
	// The working directory's tree came from the host: the protected paths beneath it
	// are protected again on top of it.
	if err := protect("", v, where); err != nil {
		return -1, false, err
	}
	if err := attachFiles("", v.Files, files, where); err != nil {
		return -1, false, err
	}
	// As in EnterView (coveringCwd): a working directory that is or lies in a protected
	// path must be entered through the read-only mount now on top of it.
	if len(v.Pin)+len(v.Protected)+len(v.Writable) > 0 {
		fd, err := reopenCwd(cwdfd, where)
		if err != nil {
			return -1, false, err
		}
		return fd, true, nil
	}
	return cwdfd, false, nil
}

func isBeneath(p, root string) bool {
	return root == "/" || len(p) > len(root) && p[:len(root)] == root && p[len(root)] == '/'
}

// TmpFD is the template's /tmp directory fd (for tests that look into it).
func (t *Template) TmpFD() int { return t.tmp }

// EnterCopy moves the calling thread (CLONE_FS unshared, locked, discarded afterwards)
// into a private copy of t's namespace: where a session's launcher is started, so that it
// lives in the template's view and never in the host's tree.
func (t *Template) EnterCopy() error {
	if err := unix.Setns(t.ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: enter template: %w", ErrView, err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: copy template: %w", ErrView, err)
	}
	return unix.Chdir("/")
}
