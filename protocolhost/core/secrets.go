// SPDX-License-Identifier: MIT

package core

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/ui"
)

// ErrSecretMissing: a secret the plugin was granted is set neither in the user's
// environment nor in fledge's secret store. The message names it, never a value.
var ErrSecretMissing = errors.New("secret not set")

// ErrSecretTooShort: a granted secret's value is shorter than audit.MinSecretBytes, too
// short to be told apart from other text, so it could not be kept out of the records.
var ErrSecretTooShort = audit.ErrSecretTooShort

// grantedSecrets resolves the plugin's granted secrets: the user's environment first, then
// `fledge secrets set` (the state dir). Any missing one refuses the run before it starts.
func (e *Env) grantedSecrets(entry *plugin.Entry) (map[string]string, error) {
	if len(entry.Granted.Secrets) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entry.Granted.Secrets))
	var missing []string
	for _, n := range policy.SecretNames(entry.Granted.Secrets) {
		if v, ok := os.LookupEnv(n); ok {
			out[n] = v
			continue
		}
		v, ok, err := plugin.LookupSecret(e.StateDir, n)
		if err != nil {
			// The error is about the file, never its content.
			return nil, fmt.Errorf("secret %s: %w", n, err)
		}
		if !ok {
			missing = append(missing, n)
			continue
		}
		out[n] = v
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: plugin %s needs %s: export it, or store it with 'fledge secrets set %s'",
			ErrSecretMissing, entry.Name, strings.Join(missing, ", "), missing[0])
	}
	// Every value is known to the redactor before the plugin can hand it back as text of its
	// own (a command line, a store key, a name it looks up): no record shows it.
	for _, n := range policy.SecretNames(entry.Granted.Secrets) {
		if err := e.Redactor().Add(n, out[n]); err != nil {
			if errors.Is(err, audit.ErrSecretTooShort) {
				return nil, fmt.Errorf("%w: %s has %d bytes, at least %d are needed for fledge to keep it out of the audit log: set a longer value, or revoke it with 'fledge plugins revoke %s secret=%s'",
					ErrSecretTooShort, n, len(out[n]), audit.MinSecretBytes, entry.Name, n)
			}
			return nil, fmt.Errorf("secret %s: %w", n, err)
		}
	}
	return out, nil
}

// RedactWarnings wraps a session's UI so that fledge's own warnings, which often quote what
// the plugin sent (a store key, a request id, a path), show no secret value this Env handed
// out. The plugin's own output and log lines pass as they are: that is the plugin speaking
// to its user.
func (e *Env) RedactWarnings(u ui.UI) ui.UI {
	r := redactingUI{UI: u, r: e.Redactor()}
	if c, ok := u.(consoleUI); ok {
		// What the console can do beyond ui.UI stays visible through the wrapper: holding
		// piped output (one write per read of the plugin's pipe) and copying what it keeps
		// (no garbage per message).
		return redactingConsole{redactingUI: r, c: c}
	}
	return r
}

// consoleUI is what ui.New's console offers beyond ui.UI.
type consoleUI interface {
	ui.Holder
	ui.TextCopier
}

type redactingConsole struct {
	redactingUI
	c consoleUI
}

func (u redactingConsole) Hold()       { u.c.Hold() }
func (u redactingConsole) Release()    { u.c.Release() }
func (u redactingConsole) CopiesText() {}

type redactingUI struct {
	ui.UI
	r *audit.Redactor
}

func (u redactingUI) Warn(message string) { u.UI.Warn(u.r.Redact(message)) }

// PlaceholderPrefix starts every placeholder fledge hands out for a bound secret.
const PlaceholderPrefix = "fledge-placeholder-"

// newPlaceholder is a placeholder unique to one secret of one session: the prefix and 32
// random hex digits (letters, digits and "-" only, so it survives URL and base64 encoding
// and header syntax unchanged).
func newPlaceholder() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux >= 3.17
	}
	return PlaceholderPrefix + hex.EncodeToString(b)
}

// bindSecrets splits the granted secrets' values: the environment of the plugin (and, for
// bound ones, of its commands) holds an unbound secret's value and a bound secret's
// placeholder; the bound secrets' values go to the session's network, which puts each into
// requests to its own destinations only.
func bindSecrets(granted []string, values map[string]string) (env map[string]string, bound []egress.Secret, placeholders map[string]string) {
	env = map[string]string{}
	for _, entry := range granted {
		name, dests := policy.SecretName(entry), policy.SecretDests(entry)
		v, ok := values[name]
		if !ok {
			continue
		}
		if len(dests) == 0 {
			env[name] = v
			continue
		}
		ds, err := egress.ParseList(dests)
		if err != nil {
			continue // validated at grant; a bad entry passes nothing
		}
		ph := newPlaceholder()
		env[name] = ph
		if placeholders == nil {
			placeholders = map[string]string{}
		}
		placeholders[name] = ph
		bound = append(bound, egress.Secret{Name: name, Placeholder: ph, Value: v, Dests: ds})
	}
	return env, bound, placeholders
}

// observeBindings is the granted secrets with each unbound one bound to every named
// destination of the grant (learn's observation run).
func observeBindings(g policy.Grants) []string {
	var names []string
	for _, d := range g.NetworkTo {
		if pd, err := egress.ParseDest(d); err == nil && !pd.IsAddress() {
			names = append(names, pd.String())
		}
	}
	out := make([]string, 0, len(g.Secrets))
	for _, e := range g.Secrets {
		if len(policy.SecretDests(e)) == 0 && len(names) > 0 {
			e = policy.SecretEntry(e, names)
		}
		out = append(out, e)
	}
	return out
}
