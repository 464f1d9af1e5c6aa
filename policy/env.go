// SPDX-License-Identifier: MIT

package policy

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// baseChildEnv is what every confined process may see (before the policy allow-list).
var baseChildEnv = []string{"PATH", "HOME", "LANG", "LC_*", "TERM", "TZ", "USER", "LOGNAME", "SHELL"}

// baseMetadataEnv is what the metadata `env` key may report: names that are harmless to show.
var baseMetadataEnv = []string{
	"PATH", "HOME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM", "TERM_PROGRAM",
	"USER", "LOGNAME", "EDITOR", "VISUAL", "PAGER", "TZ", "CI", "PWD",
}

// credentialNameParts are case-insensitive substrings of variable names that hold secrets.
// Broad on purpose (AUTH also catches GIT_AUTHOR_NAME): dropping a harmless variable costs
// little, leaking a token costs a lot.
var credentialNameParts = []string{
	"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "PASS_", "_PASS", "PWD_",
	"API_KEY", "APIKEY", "ACCESS_KEY", "PRIVATE_KEY", "SIGNING_KEY", "ENCRYPTION_KEY",
	"CREDENTIAL", "AUTH", "SESSION", "COOKIE", "BEARER", "CLIENT_KEY", "MASTER_KEY",
	"DSN", "CONNECTION_STRING", "WEBHOOK", "KUBECONFIG", "SSH_AGENT", "GPG_AGENT",
}

// credentialNamePrefixes are whole families of cloud/registry credentials.
var credentialNamePrefixes = []string{
	"AWS_", "AZURE_", "ARM_CLIENT", "GOOGLE_", "GCP_", "GCLOUD_", "CLOUDSDK_", "GH_", "GITHUB_",
	"GITLAB_", "NPM_CONFIG__", "NPM_TOKEN", "VAULT_", "DOCKER_", "HEROKU_", "DIGITALOCEAN_",
	"TF_VAR_", "OP_", "SENTRY_", "STRIPE_", "TWILIO_", "SLACK_", "OPENAI_", "ANTHROPIC_",
	"HF_", "HUGGING", "DATABASE_URL", "REDIS_URL", "MONGO",
}

// CredentialName reports whether a variable name looks like it holds a secret.
func CredentialName(name string) bool {
	n := strings.ToUpper(name)
	for _, p := range credentialNameParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	for _, p := range credentialNamePrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	// FOO_KEY, KEY, FOO_PAT: generic key/personal-access-token suffixes.
	return n == "KEY" || strings.HasSuffix(n, "_KEY") || strings.HasSuffix(n, "_PAT") || strings.HasSuffix(n, "_PW")
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
var (
	// urlUserinfo matches scheme://userinfo@ anywhere in a value.
	urlUserinfo = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://([^/?#@\s]+)@`) })
	jwtRe       = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`)
	})
	// tokenRe matches well-known token formats at a word boundary, followed by enough token
	// characters that ordinary words ("desk-top", "sk-x") do not match.
	tokenRe = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:^|[^A-Za-z0-9])(?:` + strings.Join([]string{
			`gh[pousr]_[A-Za-z0-9]{20,}`,
			`github_pat_[A-Za-z0-9_]{20,}`,
			`glpat-[A-Za-z0-9_-]{16,}`, `gl(?:dt|rt|ptt|soat|cbt|imt|agent)-[A-Za-z0-9_-]{16,}`,
			`xox[abposr]-[A-Za-z0-9-]{10,}`, `xapp-[A-Za-z0-9-]{10,}`,
			`sk-[A-Za-z0-9_-]{16,}`, `(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}`,
			`(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}`,
			`AIza[A-Za-z0-9_-]{30,}`,
			`npm_[A-Za-z0-9]{30,}`, `pypi-[A-Za-z0-9_-]{16,}`,
			`hf_[A-Za-z0-9]{20,}`, `dop_v1_[a-f0-9]{32,}`, `shp(?:at|ss|ca|pa)_[a-fA-F0-9]{20,}`,
			`SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}`, `AccountKey=[A-Za-z0-9+/=]{20,}`,
		}, "|") + `)`)
	})
	bearerRe = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)\b(?:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{16,}`)
	})
)

// LooksLikeCredential reports whether a variable (by name, or by value whatever its name)
// looks like it carries a secret: a credential-ish name, a URL with user info, a PEM block, a
// JWT, an Authorization-style header value, or a well-known token prefix (GitHub, GitLab,
// Slack, OpenAI/Stripe, AWS key ids, Google API keys, npm, PyPI, ...).
func LooksLikeCredential(name, value string) bool {
	if name != "" && CredentialName(name) {
		return true
	}
	if strings.Contains(value, "-----BEGIN") {
		return true
	}
	for _, m := range urlUserinfo().FindAllStringSubmatch(value, -1) {
		if userinfoIsSecret(m[1]) {
			return true
		}
	}
	return jwtRe().MatchString(value) || tokenRe().MatchString(value) || bearerRe().MatchString(value)
}

var plainUser = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}$`) })

// userinfoIsSecret: a password is always a secret; a bare user name is one unless it looks
// like an ordinary login ("git" in ssh://git@host), since tokens often travel as the user.
func userinfoIsSecret(ui string) bool {
	if strings.Contains(ui, ":") {
		return true
	}
	u, err := url.PathUnescape(ui)
	if err != nil {
		return true
	}
	return !plainUser().MatchString(u) || tokenRe().MatchString(u)
}

// nameMatches reports whether name matches one allow pattern (exact, or PREFIX* ).
func nameMatches(name, pattern string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return name == pattern
}

func allowed(name string, lists ...[]string) bool {
	for _, l := range lists {
		for _, p := range l {
			if nameMatches(name, p) {
				return true
			}
		}
	}
	return false
}

// filterEnv keeps the allowed, non-credential variables of environ; later duplicates win,
// as they do for exec.
func filterEnv(environ []string, lists ...[]string) map[string]string {
	out := make(map[string]string)
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsRune(kv, 0) {
			continue
		}
		if !allowed(name, lists...) || LooksLikeCredential(name, value) {
			delete(out, name)
			continue
		}
		out[name] = value
	}
	return out
}

// ChildEnv builds the complete environment of a confined process: PATH, HOME, LANG, LC_*,
// TERM, TZ, USER, LOGNAME, SHELL and the policy allow-list (exact names or PREFIX_*) taken
// from environ, minus anything whose name or value looks like a credential (even when
// allow-listed), then the host's own set entries (TMPDIR, FLEDGE_*), which are trusted and
// override. The result is sorted, so runs are reproducible.
func ChildEnv(environ []string, allow []string, set map[string]string) []string {
	m := filterEnv(environ, baseChildEnv, allow)
	for k, v := range set {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			continue
		}
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// MetadataEnv is the value of the metadata `env` key: known-harmless names plus the policy
// allow-list, with the same credential filter as ChildEnv.
func MetadataEnv(environ []string, allow []string) map[string]string {
	return filterEnv(environ, baseMetadataEnv, allow)
}

// secretQueryParams are query parameters that carry credentials in git/HTTP URLs.
var secretQueryParams = []string{
	"access_token", "token", "private_token", "auth", "oauth_token", "password", "passwd",
	"pass", "secret", "key", "api_key", "apikey", "sig", "signature", "x-amz-credential",
	"x-amz-signature", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
	"client_secret", "code", "session",
}

func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, p := range secretQueryParams {
		if n == p {
			return true
		}
	}
	return CredentialName(name)
}

// StripURLCredentials removes credentials from a git remote URL for display in init and
// metadata: the password (and a user name that looks like a token) of scheme://user:pw@host,
// the same in scp-like user:pw@host:path, and query parameters such as ?access_token=.
// Anything that cannot be parsed has every userinfo-looking part removed.
func StripURLCredentials(u string) string {
	if strings.Contains(u, "://") {
		parsed, err := url.Parse(u)
		if err != nil {
			return stripLoose(u)
		}
		if parsed.User != nil {
			_, hasPw := parsed.User.Password()
			name := parsed.User.Username()
			if hasPw || !plainUser().MatchString(name) || LooksLikeCredential("", name) {
				parsed.User = nil
			}
		}
		if parsed.RawQuery != "" {
			q := parsed.Query()
			for k := range q {
				if secretParam(k) {
					q.Del(k)
				}
			}
			parsed.RawQuery = q.Encode()
		}
		if parsed.Fragment != "" && LooksLikeCredential("", parsed.Fragment) {
			parsed.Fragment = ""
		}
		// Opaque forms ("a:b://user:pw@host") keep their userinfo through url.Parse; scrub
		// whatever still looks like one.
		return scrubUserinfo(parsed.String())
	}
	// scp-like: [user[:pw]@]host:path. The userinfo ends at the last '@' before the first
	// ':' that follows it.
	if at := strings.LastIndex(u, "@"); at > 0 {
		ui, rest := u[:at], u[at+1:]
		if !strings.ContainsAny(ui, "/") {
			if strings.Contains(ui, ":") || !plainUser().MatchString(ui) || LooksLikeCredential("", ui) {
				return rest
			}
			return u
		}
	}
	return stripLoose(u)
}

var looseUserinfo = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`//[^/?#\s]*@`) })

func stripLoose(u string) string {
	return scrubUserinfo(looseUserinfo().ReplaceAllString(u, "//"))
}

// scrubUserinfo removes every scheme://userinfo@ whose userinfo is secret.
func scrubUserinfo(u string) string {
	return urlUserinfo().ReplaceAllStringFunc(u, func(m string) string {
		sub := urlUserinfo().FindStringSubmatch(m)
		if !userinfoIsSecret(sub[1]) {
			return m
		}
		scheme, _, _ := strings.Cut(m, "://")
		return scheme + "://"
	})
}

// EnvNames returns the sorted names of an environment list (for audit records and doctor).
func EnvNames(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
