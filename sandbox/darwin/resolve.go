// SPDX-License-Identifier: MIT

package darwin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// privateAliases are macOS's top-level symlinks into /private. Seatbelt matches resolved
// paths, so a rule on "/tmp/x" never fires; it has to say "/private/tmp/x".
var privateAliases = []string{"/etc", "/tmp", "/var"}

// PrivateAliases is a pure resolver: it rewrites the macOS /etc, /tmp and /var prefixes to
// their /private targets and leaves every other path alone. Golden tests use it so profiles
// are the same on Linux and macOS; ResolveExisting falls back to it for paths that do not
// exist yet.
func PrivateAliases(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", errNotAbs
	}
	for _, a := range privateAliases {
		if p == a || strings.HasPrefix(p, a+"/") {
			return "/private" + p, nil
		}
	}
	return p, nil
}

// maxMissing bounds how many trailing components ResolveExisting strips while looking for an
// existing ancestor (a config dir not created yet is a few levels deep at most).
const maxMissing = 64

// ResolveExisting resolves p through the filesystem the way the kernel will: symlinks in
// the longest existing prefix are followed (filepath.EvalSymlinks) and the missing tail is
// appended unchanged, after which the /private aliases are applied. A path that does not
// exist yet (a state dir created later) still gets its canonical spelling, so a deny rule
// for it holds once it appears.
func ResolveExisting(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", errNotAbs
	}
	p = filepath.Clean(p)
	var tail []string
	cur := p
	for i := 0; ; i++ {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			for j := len(tail) - 1; j >= 0; j-- {
				r = filepath.Join(r, tail[j])
			}
			return PrivateAliases(r)
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if cur == "/" || i >= maxMissing {
			return "", err
		}
		tail = append(tail, filepath.Base(cur))
		cur = filepath.Dir(cur)
	}
}

// errNotAbs is returned by the resolvers for relative input.
var errNotAbs = errors.New("not an absolute path")
