// SPDX-License-Identifier: MIT

package plugin

import (
	"archive/tar"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// The unpacker of an image's layers into a plugin's rootfs. Every name a layer gives is
// hostile: it is cleaned and refused when it has "..", every directory it leads through is
// opened beneath the rootfs with openat2(RESOLVE_BENEATH), so neither a path nor a symlink
// (absolute, or relative and climbing out) can take a write outside it, and each entry is
// made with *at calls on that directory handle, never by path.

const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// unpacker applies layers, in order, to the directory root (an fd fledge opened).
type unpacker struct {
	root   int
	bounds ImageBounds
	files  int64
	bytes  int64
	// setid counts the setuid/setgid bits dropped; layer is the entries the current layer
	// made (an opaque whiteout keeps them, removes what lower layers put there).
	setid int
	layer map[string]bool
	index int // the layer being applied (1-based), for errors
	// plain refuses everything but files and directories (an OCI layout's tar).
	plain bool
}

func newUnpacker(dir string, b ImageBounds) (*unpacker, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("image root: %w", err)
	}
	return &unpacker{root: fd, bounds: b}, nil
}

func (u *unpacker) close() { unix.Close(u.root) }

func (u *unpacker) refuse(name, format string, a ...any) error {
	return &UnsafeImageError{Layer: u.index, Path: name, Why: fmt.Sprintf(format, a...)}
}

// applyLayer applies one layer's tar stream.
func (u *unpacker) applyLayer(r io.Reader) error {
	u.layer = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: layer %d: %v", ErrOCIImage, u.index, err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return err
		}
	}
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	rel, ok := cleanName(hdr.Name)
	if !ok {
		return u.refuse(hdr.Name, "the path climbs out of the image root (..)")
	}
	u.files++
	if u.files > u.bounds.Files {
		return fmt.Errorf("%w: more than %d files (the bound on an image's files)", ErrImageTooLarge, u.bounds.Files)
	}
	if rel == "" {
		return nil // the root itself: fledge made it
	}
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if u.plain && hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir {
		return u.refuse(rel, "an OCI layout archive holds files and directories only")
	}
	if strings.HasPrefix(base, ".wh.") {
		return u.whiteout(dir, base)
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		return u.refuse(rel, "a device node (an image plugin gets no devices of its own)")
	case tar.TypeFifo:
		return u.refuse(rel, "a FIFO")
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeGNUSparse:
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return u.refuse(rel, "an entry of tar type %q", string(hdr.Typeflag))
	}
	if hdr.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 && hdr.Typeflag != tar.TypeDir {
		u.setid++
	}
	pfd, err := u.mkdirs(dir, rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	for p := rel; p != "." && p != "" && !u.layer[p]; p = path.Dir(p) {
		u.layer[p] = true // and its parents: an opaque whiteout in one keeps what this layer made
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		if unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return u.chmod(pfd, base, rel, uint32(hdr.Mode)&0o777|0o700)
			}
			if err := u.removeAt(pfd, base, rel, 0); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
		}
		return u.chmod(pfd, base, rel, uint32(hdr.Mode)&0o777|0o700)
	case tar.TypeSymlink:
		if err := u.replace(pfd, base, rel); err != nil {
			return err
		}
		// Its target is kept as written: it is only ever followed inside the plugin's
		// view (where the image is the root) and, here, beneath the rootfs.
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("%w: layer %d: symlink %s: %v", ErrOCIImage, u.index, rel, err)
		}
		return nil
	case tar.TypeLink:
		return u.hardlink(pfd, base, rel, hdr.Linkname)
	}
	// A regular file (a sparse one is as large as its size says once written out).
	if hdr.Size < 0 || hdr.Size > u.bounds.Bytes-u.bytes {
		return fmt.Errorf("%w: %s in layer %d is %s, and the image may take %s in all (the bound on an image's size)",
			ErrImageTooLarge, rel, u.index, humanBytes(hdr.Size), humanBytes(u.bounds.Bytes))
	}
	if err := u.replace(pfd, base, rel); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
	}
	f := fdFile(fd, rel)
	n, err := io.CopyN(f, r, hdr.Size)
	u.bytes += n
	if err == nil {
		// setuid and setgid bits are dropped: no file of an image runs with another's rights.
		err = f.Chmod(modePerm(uint32(hdr.Mode)&0o777 | 0o600))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
	}
	return nil
}

func (u *unpacker) chmod(pfd int, base, rel string, mode uint32) error {
	if err := unix.Fchmodat(pfd, base, mode, 0); err != nil {
		return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
	}
	return nil
}

// openDir opens dir (relative to the root) as a directory beneath the root.
func (u *unpacker) openDir(dir string) (int, error) {
	if dir == "" {
		dir = "."
	}
	return unix.Openat2(u.root, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
}

// mkdirs opens the directory dir, making what is missing of it, beneath the root. A
// symlink on the way is followed only where it stays beneath the root; an absolute one, or
// one that climbs out, refuses the image.
func (u *unpacker) mkdirs(dir, rel string) (int, error) {
	for i := 0; i < 4096; i++ {
		fd, err := u.openDir(dir)
		if err == nil {
			return fd, nil
		}
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
			return -1, u.refuse(rel, "it is reached through a symlink that leads out of the image root (or an absolute one)")
		}
		if errors.Is(err, unix.ENOTDIR) {
			return -1, u.refuse(rel, "a parent of it is not a directory")
		}
		if !errors.Is(err, unix.ENOENT) {
			return -1, fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
		}
		// Make the first missing element: the deepest existing ancestor, opened beneath
		// the root like the rest, gets the next one.
		parts := strings.Split(dir, "/")
		made := false
		for k := len(parts) - 1; k >= 0 && !made; k-- {
			pfd, err := u.openDir(strings.Join(parts[:k], "/"))
			if err != nil {
				continue
			}
			err = unix.Mkdirat(pfd, parts[k], 0o755)
			unix.Close(pfd)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
			}
			made = true
		}
		if !made {
			return -1, u.refuse(rel, "its directory cannot be made beneath the image root")
		}
	}
	return -1, u.refuse(rel, "its directory cannot be made beneath the image root")
}

// replace removes what a lower layer left at base (a later layer's entry wins).
func (u *unpacker) replace(pfd int, base, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil
	}
	return u.removeAt(pfd, base, rel, 0)
}

// removeAt removes base in pfd, a directory with everything in it, never following a
// symlink (each directory is opened O_NOFOLLOW by its handle's name).
func (u *unpacker) removeAt(pfd int, base, rel string, depth int) error {
	if depth > 512 {
		return u.refuse(rel, "directories nested deeper than 512")
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(pfd, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%w: layer %d: remove %s: %v", ErrOCIImage, u.index, rel, err)
		}
		return nil
	}
	if err := u.emptyDir(pfd, base, rel, depth, nil); err != nil {
		return err
	}
	if err := unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: layer %d: remove %s: %v", ErrOCIImage, u.index, rel, err)
	}
	return nil
}

// emptyDir removes the entries of the directory base in pfd, except those keep says to.
func (u *unpacker) emptyDir(pfd int, base, rel string, depth int, keep func(child string) bool) error {
	dfd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
	}
	f := fdFile(dfd, rel)
	defer f.Close()
	// Every name first, then the removals (the directory holds at most the image's bound
	// of files).
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
	}
	for _, n := range names {
		child := path.Join(rel, n)
		if keep != nil && keep(child) {
			continue
		}
		if err := u.removeAt(dfd, n, child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// whiteout applies a whiteout entry of directory dir: .wh.NAME removes NAME as lower
// layers left it, .wh..wh..opq empties dir of what lower layers put there.
func (u *unpacker) whiteout(dir, base string) error {
	rel := path.Join(dir, base)
	pfd, err := u.openDir(dir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // nothing below to hide
		}
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
			return u.refuse(rel, "it is reached through a symlink that leads out of the image root (or an absolute one)")
		}
		return fmt.Errorf("%w: layer %d: %s: %v", ErrOCIImage, u.index, rel, err)
	}
	defer unix.Close(pfd)
	if base == ".wh..wh..opq" {
		return u.emptyDir(pfd, ".", dir, 0, func(child string) bool { return u.layer[child] })
	}
	name := strings.TrimPrefix(base, ".wh.")
	if name == "" || name == "." || strings.Contains(name, "/") {
		return u.refuse(rel, "a whiteout of nothing")
	}
	return u.removeAt(pfd, name, path.Join(dir, name), 0)
}

// hardlink links rel to the regular file target names, both beneath the root.
func (u *unpacker) hardlink(pfd int, base, rel, target string) error {
	t, ok := cleanName(target)
	if !ok || t == "" {
		return u.refuse(rel, "a hard link to %q, outside the image root", clip.Bytes(target, 80))
	}
	tdir, tbase := path.Split(t)
	tfd, err := u.openDir(strings.TrimSuffix(tdir, "/"))
	if err != nil {
		return u.refuse(rel, "a hard link to %q, which is not beneath the image root", clip.Bytes(target, 80))
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return u.refuse(rel, "a hard link to %q, which is no file of the image", clip.Bytes(target, 80))
	}
	if t == rel {
		return nil
	}
	if err := u.replace(pfd, base, rel); err != nil {
		return err
	}
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return fmt.Errorf("%w: layer %d: hard link %s: %v", ErrOCIImage, u.index, rel, err)
	}
	return nil
}

func fdFile(fd int, name string) *os.File { return os.NewFile(uintptr(fd), name) }

func modePerm(m uint32) os.FileMode { return os.FileMode(m) }
