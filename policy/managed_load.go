// SPDX-License-Identifier: MIT

//go:build unix

package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
)

// ManagedDir is where the managed policy lives. It is fixed: no environment variable, flag
// or config setting can point fledge elsewhere, so a user cannot swap in a policy of their
// own.
func ManagedDir() string {
	if runtime.GOOS == "darwin" {
		return "/Library/Application Support/fledge"
	}
	return "/etc/fledge"
}

// LoadManaged reads ManagedDir's managed.toml and managed.d/*.toml (in name order). Each
// file is read only when it is a regular file owned by root and writable by no one else,
// and so is every directory above it (followed through symlinks, both the path as written
// and where it leads); anything else is an error (ErrManaged), never a file skipped. No
// file at all is no policy (nil).
func LoadManaged() (*Managed, error) { return loadManagedFrom(ManagedDir()) }

func loadManagedFrom(dir string) (*Managed, error) {
	var paths []string
	main := filepath.Join(dir, ManagedFile)
	if _, err := os.Lstat(main); err == nil {
		paths = append(paths, main)
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return nil, managedErr(main, err.Error())
	}
	dropIns := filepath.Join(dir, ManagedDropIns)
	if _, err := os.Lstat(dropIns); err == nil {
		if err := checkTrusted(dropIns, true); err != nil {
			return nil, err
		}
		d, err := os.Open(dropIns)
		if err != nil {
			return nil, managedErr(dropIns, err.Error())
		}
		names, err := d.Readdirnames(maxManagedFiles*4 + 1)
		d.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, managedErr(dropIns, err.Error())
		}
		sort.Strings(names)
		var toml []string
		for _, n := range names {
			if strings.HasSuffix(n, ".toml") && !strings.HasPrefix(n, ".") {
				toml = append(toml, n)
			}
		}
		if len(toml) > maxManagedFiles || len(names) > maxManagedFiles*4 {
			return nil, managedErr(dropIns, fmt.Sprintf("more than %d files", maxManagedFiles))
		}
		for _, n := range toml {
			paths = append(paths, filepath.Join(dropIns, n))
		}
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return nil, managedErr(dropIns, err.Error())
	}
	if len(paths) == 0 {
		return nil, nil
	}
	files := make([][2]string, 0, len(paths))
	for _, p := range paths {
		data, err := readTrusted(p)
		if err != nil {
			return nil, err
		}
		files = append(files, [2]string{p, string(data)})
	}
	return ParseManaged(files)
}

func managedErr(path, why string) error {
	return fmt.Errorf("%w %s refused: %s (it is read only when root owns it and alone can write it and every directory above it)", ErrManaged, path, why)
}

// readTrusted reads a managed file after checking it and its directories; the opened file
// itself is checked again (fstat), so what is read is what was checked.
func readTrusted(path string) ([]byte, error) {
	if err := checkTrusted(path, false); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, managedErr(path, err.Error())
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, managedErr(path, err.Error())
	}
	if why := untrusted(fi, false); why != "" {
		return nil, managedErr(path, why)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, managedErr(path, err.Error())
	}
	if len(data) > MaxConfigBytes {
		return nil, managedErr(path, fmt.Sprintf("larger than %d bytes", MaxConfigBytes))
	}
	return data, nil
}

// checkTrusted checks path (a file, or a dir when dir) and every directory above it, as
// written and as resolved.
func checkTrusted(path string, dir bool) error {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return managedErr(path, err.Error())
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return managedErr(path, err.Error())
	}
	if why := untrusted(fi, dir); why != "" {
		return managedErr(path, why)
	}
	for _, p := range []string{path, resolved} {
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil {
				return managedErr(path, err.Error())
			}
			if why := untrusted(fi, true); why != "" {
				return managedErr(path, "its directory "+d+" is "+strings.TrimPrefix(why, "it is "))
			}
			if d == "/" || d == "." {
				break
			}
		}
	}
	return nil
}

// untrusted says why fi is not root's alone ("" when it is).
func untrusted(fi fs.FileInfo, dir bool) string {
	switch {
	case dir && !fi.IsDir():
		return "not a directory"
	case !dir && !fi.Mode().IsRegular():
		return "not a regular file"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "its owner cannot be read"
	}
	if st.Uid != 0 {
		return fmt.Sprintf("owned by uid %d, not root", st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("writable by others than root (mode %04o)", fi.Mode().Perm())
	}
	return ""
}
