package core

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fledgehq/fledge/plugin"
)

// ErrSecretMissing: a secret the plugin was granted is set neither in the user's
// environment nor in fledge's secret store. The message names it, never a value.
var ErrSecretMissing = errors.New("secret not set")

// grantedSecrets resolves the plugin's granted secrets: the user's environment first, then
// `fledge secrets set` (the state dir). Any missing one refuses the run before it starts.
func (e *Env) grantedSecrets(entry *plugin.Entry) (map[string]string, error) {
	if len(entry.Granted.Secrets) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entry.Granted.Secrets))
	var missing []string
	for _, n := range entry.Granted.Secrets {
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
	return out, nil
}
