// SPDX-License-Identifier: MIT

package linux

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// etcSecrets are what /etc holds that only root may read: password hashes, sudo rules,
// TLS and SSH host private keys. Granting "/etc" read-only grants them too when fledge runs
// as root (the owner's permission bits apply even without capabilities), so the /etc rule
// is expanded entry by entry without them (Landlock cannot subtract beneath a rule).
var etcSecrets = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
	"/etc/ssl/private", "/etc/ssh/ssh_host_*_key", "/etc/security/opasswd",
}

// maxEtcRules bounds the rules one /etc expansion may make.
const maxEtcRules = 2048

// expandEtc replaces an "/etc" rule by the entries of /etc minus etcSecrets. Symlinks are
// left out: with the whole dir allowed, a link was followed to its target and judged
// there, and that stays so (the lookup through /etc is not restricted by Landlock).
func expandEtc(paths []string) []string {
	out := make([]string, 0, len(paths))
	done := false
	for _, p := range paths {
		if filepath.Clean(p) != "/etc" {
			out = append(out, p)
			continue
		}
		if !done {
			out = append(out, etcCache.list("/etc", etcSecrets)...)
			done = true
		}
	}
	return out
}

// The expansion is the same for every exec until /etc changes, and listing /etc and
// matching each entry against the secret patterns was a measurable part of a short exec
// (docs/performance.md). So the last expansion is kept with the identity and times of each
// directory it listed, and reused while every one of them is unchanged: a directory's
// mtime and ctime move whenever an entry is added, removed, renamed or replaced. The
// stamps are taken before each listing, and an expansion is kept only when every stamp
// is older than etcSettle, so a change within the filesystem's timestamp granularity
// after a listing still shows as a newer time.
const etcSettle = time.Second

type dirStamp struct {
	path         string
	dev, ino     uint64
	mtime, ctime unix.Timespec
	mode         uint32
}

type etcExpansion struct {
	mu      sync.Mutex
	root    string
	secrets []string
	stamps  []dirStamp
	out     []string
}

var etcCache etcExpansion

func stampDir(path string) (dirStamp, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return dirStamp{}, false
	}
	return dirStamp{path: path, dev: st.Dev, ino: st.Ino, mtime: st.Mtim, ctime: st.Ctim, mode: st.Mode}, true
}

// list returns dir's entries minus secrets, from the kept expansion while it is current.
func (c *etcExpansion) list(dir string, secrets []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.root == dir && slices.Equal(c.secrets, secrets) && c.stamps != nil {
		current := true
		for _, old := range c.stamps {
			if now, ok := stampDir(old.path); !ok || now != old {
				current = false
				break
			}
		}
		if current {
			return append([]string(nil), c.out...)
		}
	}
	var stamps []dirStamp
	n := 0
	out := allowExcept(dir, secrets, &n, &stamps)
	c.root, c.stamps, c.out = "", nil, nil
	settled := time.Now().Add(-etcSettle)
	for _, st := range stamps {
		if st.path == "" || time.Unix(st.mtime.Unix()).After(settled) || time.Unix(st.ctime.Unix()).After(settled) {
			return out // too fresh (or unstatable) to trust its times: not kept
		}
	}
	c.root, c.secrets, c.stamps, c.out = dir, append([]string(nil), secrets...), stamps, append([]string(nil), out...)
	return out
}

// allowExcept lists dir minus secrets (recursing into directories with a secret below),
// appending the stamp of each directory it lists to stamps, taken before the listing.
func allowExcept(dir string, secrets []string, n *int, stamps *[]dirStamp) []string {
	st, _ := stampDir(dir) // a failed stat leaves path "": never kept
	*stamps = append(*stamps, st)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // unlistable: grant nothing rather than everything
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if isSecret(p, secrets) || e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		if e.IsDir() && hasSecretBelow(p, secrets) {
			out = append(out, allowExcept(p, secrets, n, stamps)...)
			continue
		}
		if *n >= maxEtcRules {
			break
		}
		*n++
		out = append(out, p)
	}
	return out
}

func isSecret(p string, secrets []string) bool {
	for _, s := range secrets {
		if ok, _ := filepath.Match(s, p); ok {
			return true
		}
	}
	return false
}

func hasSecretBelow(dir string, secrets []string) bool {
	for _, s := range secrets {
		if strings.HasPrefix(s, dir+"/") {
			return true
		}
	}
	return false
}
