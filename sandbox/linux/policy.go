package linux

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/sandbox"
)

// SystemReadExec are the system paths a command needs read+execute on. Callers add them
// (with the user's PATH entries) to Access.ReadExec; missing ones are skipped.
var SystemReadExec = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// Paths every confined command gets besides the Spec's own:
//   - /etc read-only (resolver, passwd lookups, locale, ssl certs), without its root-only
//     secrets (see etcSecrets);
//   - /proc read-only: ps and /dev/fd need it; other processes' environ, mem and fds stay
//     out of reach because Landlock also denies ptrace-mode access outside the domain;
//   - the harmless character devices read-only, and /dev/null read-write.
//
// Not granted: /dev/tty (no terminal, see stub), /dev/shm, /sys, /run, $HOME.
var (
	implicitReadOnly  = []string{"/etc", "/proc", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"}
	implicitReadWrite = []string{"/dev/null"}
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
			n := 0
			out = append(out, allowExcept("/etc", etcSecrets, &n)...)
			done = true
		}
	}
	return out
}

func allowExcept(dir string, secrets []string, n *int) []string {
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
			out = append(out, allowExcept(p, secrets, n)...)
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

// within reports whether p equals root or lies beneath it (both clean and absolute).
func within(p, root string) bool {
	if p == root || root == "/" {
		return true
	}
	return strings.HasPrefix(p, root+"/")
}

// forms returns the lexical form of p and, when it differs, its symlink-resolved form:
// Landlock resolves rules when they are added, so both must be checked.
func forms(p string) []string {
	c := filepath.Clean(p)
	out := []string{c}
	if r, err := filepath.EvalSymlinks(c); err == nil && r != c {
		out = append(out, r)
	}
	return out
}

// checkAccess refuses a spec whose allow-list is not absolute or covers a Deny path:
// Landlock can only add access, never subtract it beneath an allowed directory. An allow
// entry inside a denied tree (a plugin's own dir under the config dir) is an explicit carve
// out and fine.
func checkAccess(a *sandbox.Access, extra ...string) error {
	allow := make([]string, 0, len(a.ReadWrite)+len(a.ReadOnly)+len(a.ReadExec)+len(extra))
	allow = append(allow, a.ReadWrite...)
	allow = append(allow, a.ReadOnly...)
	allow = append(allow, a.ReadExec...)
	allow = append(allow, extra...)
	for _, p := range append(append([]string{}, allow...), a.Deny...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: path %q is not absolute", sandbox.ErrInvalidSpec, p)
		}
	}
	for _, d := range a.Deny {
		for _, df := range forms(d) {
			for _, p := range allow {
				for _, pf := range forms(p) {
					if within(df, pf) {
						return fmt.Errorf("%w: allowed path %q covers denied path %q", sandbox.ErrInvalidSpec, p, d)
					}
				}
			}
		}
	}
	return nil
}
