// SPDX-License-Identifier: MIT

package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/policy"
)

// wrapExecutable is what `plugins install <executable> --protocol jsonrpc-2.0` builds.
func wrapExecutable(t *testing.T, desc string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tool-x"), []byte("#!/bin/sh\n"), 0o755))
	// A file of the host-owned name in the source must never reach the installed copy.
	require.NoError(t, os.WriteFile(filepath.Join(dir, HandshakeFile), []byte(`{"forged":true}`), 0o644))
	m, err := WriteExecutableManifest(dir, ExecutableMeta{
		Name: "tool-x", Version: "1.2.3", Description: desc, Protocol: ProtocolJSONRPC,
		Binary: "tool-x", Filesystem: policy.FilesystemProject, Network: true,
	})
	require.NoError(t, err)
	assert.Equal(t, desc, m.Plugin.Description, "quotes and backslashes survive TOML")
	assert.Equal(t, []string{"tool-x"}, m.CommandNames())
	assert.Equal(t, policy.Grants{Network: true, Filesystem: policy.FilesystemProject}, m.Declared())
	return dir
}

func TestInstallKeepsHandshakeAndRecordedSource(t *testing.T) {
	cfg := t.TempDir()
	src := wrapExecutable(t, `say "hi" \ bye`)
	var seen *Manifest
	e, _, err := install(t, cfg, src, func(o *InstallOptions) {
		o.RecordSource = "/opt/plugins/tool-x"
		o.Grant = &policy.Grants{Filesystem: policy.FilesystemProject}
		o.Handshake = func(_ context.Context, dir string, m *Manifest) ([]byte, error) {
			assert.Equal(t, src, dir)
			seen = m
			return []byte(`{"name":"tool-x"}`), nil
		}
	})
	require.NoError(t, err)
	require.NotNil(t, seen)
	assert.Equal(t, "/opt/plugins/tool-x", e.Source)
	assert.Equal(t, ProtocolJSONRPC, e.Protocol)
	assert.Equal(t, policy.Grants{Filesystem: policy.FilesystemProject}, e.Granted)
	got, err := os.ReadFile(filepath.Join(Dir(cfg, "tool-x"), HandshakeFile))
	require.NoError(t, err)
	assert.Equal(t, `{"name":"tool-x"}`, string(got), "the handshake install ran, not the source's file")
}

func TestInstallHandshakeRefusal(t *testing.T) {
	cfg := t.TempDir()
	src := wrapExecutable(t, "d")
	boom := errors.New("handshake failed: no answer in time")
	_, _, err := install(t, cfg, src, func(o *InstallOptions) {
		o.Yes = true
		o.Handshake = func(context.Context, string, *Manifest) ([]byte, error) { return nil, boom }
	})
	require.ErrorIs(t, err, boom)
	reg, err := LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Empty(t, reg.Plugins, "nothing is installed")
	_, err = os.Stat(Dir(cfg, "tool-x"))
	assert.True(t, os.IsNotExist(err))
}

func TestWriteExecutableManifestRefusesBadNames(t *testing.T) {
	_, err := WriteExecutableManifest(t.TempDir(), ExecutableMeta{Name: "tools", Protocol: ProtocolJSONRPC, Binary: "x"})
	require.ErrorIs(t, err, ErrInvalidManifest, "fledge's own subcommands are reserved")
}
