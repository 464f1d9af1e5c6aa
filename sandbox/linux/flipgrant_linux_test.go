// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
)

// TestAttackFlippedGrantCannotCoverDenied: a command flips a symlink in the project it may
// write (a virtualenv's bin, granted read+exec because it is on the user's PATH) between a
// harmless directory and the parent of fledge's config dir, as fast as it can, while the
// plugin's next commands try to read a file in the config dir. The names are checked before
// each launch, but the link can change between that check and the Landlock rule made from
// it; the rule is checked on what it was made from, so no command ever reads the file, and
// the launches that catch the link at the parent are refused as covering a denied path.
func TestAttackFlippedGrantCannotCoverDenied(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{{"view", Options{}}, {"landlock-only", Options{DisableView: true}}} {
		t.Run(c.name, func(t *testing.T) { flipGrant(t, newSandbox(t, c.opts)) })
	}
}

// flipGrant runs the attack against sb: with the private view, the grant's target is not in
// the view either; without it (a user without namespaces), Landlock's rule is all there is.
func flipGrant(t *testing.T, sb *Sandbox) {
	requireLandlock(t, sb)
	e := newEnv(t)
	venv := filepath.Join(e.project, ".venv")
	harmless := filepath.Join(venv, "real-bin")
	require.NoError(t, os.MkdirAll(harmless, 0o755))
	link := filepath.Join(venv, "bin")
	require.NoError(t, os.Symlink(harmless, link))
	parent := filepath.Dir(e.config)
	secret := filepath.Join(e.config, "plugins.toml")

	// The flipper: a confined command of the same plugin, writing only its project.
	flip := e.spec(`while :; do ln -s "$1" "$3.a"; mv -T "$3.a" "$3"; ln -s "$2" "$3.b"; mv -T "$3.b" "$3"; done`,
		"flip", parent, harmless, link)
	flip.Stdout, flip.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	fp, err := sb.Start(ctx, flip)
	require.NoError(t, err)
	defer func() { cancel(); _ = fp.Kill(); waitFor(t, fp) }()

	var ran, refused, leaked int
	// Time, not a count: a refused launch takes a fraction of a flip.
	deadline := time.Now().Add(4 * time.Second)
	for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
		spec := e.spec(`cat "$1" "$2/fledge/plugins.toml" 2>/dev/null; exit 0`, "read", secret, link)
		spec.Access.ReadExec = append(append([]string{}, SystemReadExec...), link)
		var out bytes.Buffer
		spec.Stdout, spec.Stderr = &out, &bytes.Buffer{}
		p, err := sb.Start(context.Background(), spec)
		if err != nil {
			// Refused: by the names' check, or by the rule's.
			require.True(t, errors.Is(err, sandbox.ErrInvalidSpec) || errors.Is(err, kernel.ErrCoversDenied), "%v", err)
			refused++
			continue
		}
		waitFor(t, p)
		ran++
		if strings.Contains(out.String(), "[x]") {
			leaked++
		}
	}
	t.Logf("%d launches ran, %d refused, %d read the denied file", ran, refused, leaked)
	assert.Zero(t, leaked, "a command read a file in a denied directory through a flipped grant")
	assert.Positive(t, ran)
	assert.Positive(t, refused, "the flipper never caught a launch (the test proves nothing)")
}
