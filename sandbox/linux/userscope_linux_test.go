// SPDX-License-Identifier: MIT

package linux

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// An ordinary user without a writable cgroup asks the user's systemd manager for a
// delegated scope over the session bus. This machine runs no systemd user manager (and
// `systemd --user` cannot start without systemd as init), so the request goes to a real
// dbus-daemon --session where systemd's name has no owner: the fallback is taken cleanly
// (nothing moved, no scope), and why is in the warnings doctor shows.
func TestUserScopeFallsBackWithoutUserManager(t *testing.T) {
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		testutil.SkipUnlessSupported(t, false, "dbus-daemon not installed")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, daemon, "--session", "--nofork", "--nopidfile", "--print-address=1",
		"--address=unix:path="+filepath.Join(dir, "bus"))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { cancel(); _ = cmd.Wait() }()
	addrCh := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		addrCh <- strings.TrimSpace(l)
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case <-time.After(10 * time.Second):
		t.Fatal("dbus-daemon gave no address")
	}
	require.NotEmpty(t, addr)

	before, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	_, err = delegatedScope(addr)
	require.ErrorIs(t, err, errNoUserManager)
	assert.Contains(t, err.Error(), "org.freedesktop.DBus.Error.NameHasNoOwner")
	after, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "the fallback moved nothing")

	t.Setenv("DBUS_SESSION_BUS_ADDRESS", addr)
	e := &cgEnv{mode: CgroupNone, v1: map[string]string{}, v2Ctl: map[string]bool{}}
	got := userScopeCgroups(e)
	assert.False(t, got.writable())
	assert.Empty(t, got.scope)
	require.Len(t, got.warnings, 1)
	assert.Contains(t, got.warnings[0], "no delegated cgroup from a systemd user manager (no systemd user manager on the session bus")

	// No bus at all: said as such.
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "none"))
	_, err = sessionBusAddress()
	require.ErrorIs(t, err, errNoSessionBus)
}
