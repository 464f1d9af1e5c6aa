// SPDX-License-Identifier: MIT

package wasm_test

import (
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocol"
)

// TestAttacksFromInsideTheGuest runs the escape attempts of the reference's WASM canary (and
// more) from inside a module with the widest filesystem grant, and checks each one both by
// what the guest saw and on the host's disk.
func TestAttacksFromInsideTheGuest(t *testing.T) {
	f := newFixture(t, "probe", protocol.Capabilities{Filesystem: "project"})
	outside := filepath.Join(f.root, "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("host secret"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(f.home, "secret"), []byte("home secret"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(f.project, "marker.txt"), []byte("project file"), 0o644))
	// A link planted in the data dir (by an earlier run, a native tool...) that leads out.
	require.NoError(t, os.Symlink(outside, filepath.Join(f.dataDir, "escape-link")))
	for _, p := range []string{"/tmp/wasm-pwned", "/wasm-pwned"} {
		_ = os.Remove(p)
	}
	cwd, err := os.Getwd()
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()

	out := f.mustRun("attack", f.home, outside, ln.Addr().String())
	assert.Equal(t, 0, out.ExitCode)
	r := f.report()
	t.Logf("guest report: %v", r)

	assert.Equal(t, "0", r["env_count"], "the environment is empty")
	assert.Equal(t, "1", r["arg_count"], "no arguments beyond the program name")
	// Positive controls: the grant's own directories work.
	assert.Equal(t, "ok", r["read /project/marker.txt"])
	assert.Equal(t, "ok", r["write /plugin"])
	assert.Equal(t, "ok", r["mkdir /plugin/sub"])
	assert.Equal(t, "ok", r["list /plugin"])
	for _, k := range []string{
		"read /etc/passwd", "read /etc/hosts", "read outside", "read home",
		"read ../../../etc/passwd", "read /plugin/../../../etc/passwd", "read /project/../../../etc/passwd",
		"read /plugin/escape-link",
		"list /", "list /tmp", "list /etc", "list home",
		"write /tmp", "write /", "write relative", "write home", "write /project", "write /plugin/..",
		"symlink /plugin/link", "symlink relative",
		"spawn /bin/sh", "spawn echo", "dial tcp",
	} {
		v, ok := r[k]
		require.True(t, ok, "no result for %q: %v", k, r)
		assert.NotEqual(t, "ok", v, "%s must fail inside the module", k)
	}

	// On disk: the one write that may happen happened in the data dir, nowhere else.
	data, err := os.ReadFile(filepath.Join(f.dataDir, "ok.txt"))
	require.NoError(t, err)
	assert.Equal(t, "pwned", string(data))
	for _, p := range []string{
		"/tmp/wasm-pwned", "/wasm-pwned", filepath.Join(cwd, "wasm-pwned"),
		filepath.Join(f.home, "wasm-pwned"), filepath.Join(f.project, "wasm-pwned"),
		filepath.Join(f.pluginDir, "wasm-pwned"), filepath.Join(f.dataDir, "link"), filepath.Join(f.dataDir, "link2"),
	} {
		_, err := os.Lstat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s must not exist", p)
	}
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(b))
	// Whatever the guest's fake network did in-module (a listen and dial on the host
	// listener's port), nothing reached the host.
	assert.Zero(t, accepted.Load(), "no connection reached the host's listener")
}

// TestNoFilesystemGrantNoPreopens: with filesystem = "none" even the data dir is absent.
func TestNoFilesystemGrantNoPreopens(t *testing.T) {
	f := newFixture(t, "probe", protocol.Capabilities{Filesystem: "none"})
	outside := filepath.Join(f.root, "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("x"), 0o644))
	f.mustRun("attack", f.home, outside, "127.0.0.1:9")
	r := f.report()
	for _, k := range []string{"write /plugin", "list /plugin", "read /project/marker.txt", "mkdir /plugin/sub"} {
		assert.NotEqual(t, "ok", r[k], k)
	}
	ents, err := os.ReadDir(f.dataDir)
	require.NoError(t, err)
	assert.Empty(t, ents)
}
