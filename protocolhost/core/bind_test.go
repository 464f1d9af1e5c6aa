// SPDX-License-Identifier: MIT

package core_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/testkit/adaptertest"
)

// Bind makes the plugin's data dir beneath the config dir without following a symlink: a
// data dir that is a link (to a directory standing for /etc) is refused and recorded, not
// granted read-write to the plugin. (The plugin dir is read-only to the plugin, so this is
// the second line; the link a plugin can plant is one level down, see jsonrpc.)
func TestBindRefusesSymlinkedDataDir(t *testing.T) {
	f := adaptertest.New(t, nil)
	f.Install(map[string]string{
		"plugin.toml": "[plugin]\nname = \"dd\"\nversion = \"0.1.0\"\n\n[[commands]]\nname = \"hello\"\nbinary = \"run.sh\"\n",
		"run.sh":      "#!/bin/sh\necho hi\n",
	}, policy.Grants{})
	outside := filepath.Join(f.Root, "etc")
	require.NoError(t, os.Mkdir(outside, 0o755))
	data := plugin.DataDir(f.Env.ConfigDir, "dd")
	require.NoError(t, os.RemoveAll(data))
	require.NoError(t, os.Symlink(outside, data))

	reg, err := plugin.LoadRegistry(f.Env.ConfigDir)
	require.NoError(t, err)
	_, err = f.Env.Bind(reg.Find("dd"), f.Project)
	require.ErrorIs(t, err, safefs.ErrUnsafePath)
	assert.Contains(t, err.Error(), "data is a symlink")
	starts := f.Find(audit.EventPluginStart)
	require.NotEmpty(t, starts)
	assert.Equal(t, audit.Deny, starts[len(starts)-1].Decision)

	// A data dir that is missing is made (a plain directory, beneath the config dir).
	require.NoError(t, os.Remove(data))
	b, err := f.Env.Bind(reg.Find("dd"), f.Project)
	require.NoError(t, err)
	st, err := os.Lstat(b.DataDir)
	require.NoError(t, err)
	assert.True(t, st.IsDir())
}
