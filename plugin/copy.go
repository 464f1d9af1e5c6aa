// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fledgehq/fledge/policy"
)

// Copy bounds for an installed plugin tree.
const (
	MaxTreeFiles = 10000
	MaxTreeBytes = 256 << 20
)

var (
	// ErrUnsafeTree: the plugin tree holds something that cannot be installed safely: a symlink
	// leaving the tree, a device, socket or FIFO.
	ErrUnsafeTree = errors.New("unsafe plugin tree")
	// ErrTreeTooLarge: the plugin tree is over MaxTreeFiles or MaxTreeBytes.
	ErrTreeTooLarge = errors.New("plugin tree too large")
)

// hostOwned are top-level names in a plugin dir that belong to the host: a source tree that
// ships them does not get to seed them.
var hostOwned = map[string]bool{StateFile: true, "data": true, ".git": true, HandshakeFile: true}

// copyTree copies the plugin tree at src into the empty dir dst: regular files (exec bits
// kept, setuid/setgid and group/world write dropped) and dirs; a symlink whose target stays
// inside the tree (both lexically and after resolution) is recreated as a relative link;
// anything else is refused. It returns the names of skipped host-owned entries.
func copyTree(src, dst string) (skipped []string, err error) {
	realSrc, err := filepath.EvalSymlinks(src)
	if err != nil {
		return nil, err
	}
	files := 0
	var total int64
	err = filepath.WalkDir(realSrc, func(path string, d fs.DirEntry, werr error) error {
		if werr != nil {
			return werr
		}
		rel, err := filepath.Rel(realSrc, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if !strings.Contains(rel, string(filepath.Separator)) && hostOwned[rel] {
			skipped = append(skipped, rel)
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		files++
		if files > MaxTreeFiles {
			return fmt.Errorf("%w: more than %d files", ErrTreeTooLarge, MaxTreeFiles)
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			return os.Mkdir(target, 0o755)
		case mode.IsRegular():
			n, err := copyFile(path, target, mode.Perm()&0o755|0o600, MaxTreeBytes-total)
			total += n
			return err
		case mode&fs.ModeSymlink != 0:
			link, err := safeLink(realSrc, path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		default:
			return fmt.Errorf("%w: %s is a %s, not a file or directory", ErrUnsafeTree, rel, fileKind(mode))
		}
	})
	return skipped, err
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	}
	return "special file"
}

// safeLink checks the symlink at path (inside root) and returns the target to recreate: the
// same relative target, or an absolute one rewritten relative, as long as it stays inside
// root both as written and as resolved (so "sub/../.." tricks through other links fail too).
func safeLink(root, path string) (string, error) {
	rel, _ := filepath.Rel(root, path)
	t, err := os.Readlink(path)
	if err != nil {
		return "", err
	}
	abs := t
	if !filepath.IsAbs(t) {
		abs = filepath.Join(filepath.Dir(path), t)
	}
	if !policy.Within(abs, root) {
		return "", fmt.Errorf("%w: symlink %s points outside the plugin (%s)", ErrUnsafeTree, rel, t)
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%w: symlink %s (-> %s) cannot be resolved: %v", ErrUnsafeTree, rel, t, err)
	}
	if !policy.Within(resolved, root) {
		return "", fmt.Errorf("%w: symlink %s resolves outside the plugin (%s)", ErrUnsafeTree, rel, t)
	}
	if filepath.IsAbs(t) {
		return filepath.Rel(filepath.Dir(path), abs)
	}
	return t, nil
}

// copyFile copies one regular file without following a symlink swapped in at either end,
// failing once more than budget bytes were copied.
func copyFile(src, dst string, perm os.FileMode, budget int64) (int64, error) {
	in, err := os.OpenFile(src, os.O_RDONLY|oNoFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%w: %s changed while being copied", ErrUnsafeTree, src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(in, budget+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > budget {
		err = fmt.Errorf("%w: more than %d bytes", ErrTreeTooLarge, MaxTreeBytes)
	}
	if err == nil {
		err = os.Chmod(dst, perm) // umask must not strip the exec bits
	}
	return n, err
}
