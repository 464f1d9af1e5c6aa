package linux

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
