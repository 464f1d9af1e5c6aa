// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// onlyHolder runs `true` in sb (which starts its holder) and returns that holder.
func onlyHolder(t *testing.T, sb *Sandbox) *pidHolder {
	t.Helper()
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec(`true`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	sb.pidns.mu.Lock()
	defer sb.pidns.mu.Unlock()
	require.Len(t, sb.pidns.holders, 1)
	for _, h := range sb.pidns.holders {
		return h
	}
	return nil
}

// procStatus reads the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// TestPidNamespaceForkedHolderHoldsNothing: the holder forked from fledge (not an exec of
// it) is every command's pid 1, and shared fledge's memory, fds and capabilities until its
// execve. It must hold none of them after: no capability, no fd but its socket, no
// mapping of fledge's binary or heap (a few pages of its own), every signal blocked and
// SIGCHLD ignored (the kernel reaps its orphans). A command's attempts on it are
// TestPidNamespaceHolderUnreachableWithoutLandlock and TestPidNamespaceHolderSurvivesSignals.
func TestPidNamespaceForkedHolderHoldsNothing(t *testing.T) {
	testutil.SkipUnlessSupported(t, runtime.GOARCH == "amd64", "the forked holder is amd64 only")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, sb)
	h := onlyHolder(t, sb)
	exe, err := os.Executable()
	require.NoError(t, err)

	st := procStatus(t, h.proc.Pid)
	for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		assert.Equal(t, "0000000000000000", st[c], "%s: the holder keeps a capability", c)
	}
	blk, err := strconv.ParseUint(st["SigBlk"], 16, 64)
	require.NoError(t, err)
	// Every signal but SIGKILL and SIGSTOP, which cannot be blocked.
	assert.Equal(t, ^uint64(0)&^(1<<(9-1))&^(1<<(19-1)), blk, "SigBlk %s", st["SigBlk"])
	ign, err := strconv.ParseUint(st["SigIgn"], 16, 64)
	require.NoError(t, err)
	assert.NotZero(t, ign&(1<<(17-1)), "SIGCHLD is ignored (the kernel reaps): SigIgn %s", st["SigIgn"])
	rss, _ := strconv.Atoi(strings.Fields(st["VmRSS"] + " 0")[0])
	assert.Less(t, rss, 1024, "the holder's resident memory (kB): fledge's heap is not in it")

	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", h.proc.Pid))
	require.NoError(t, err)
	var names []string
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", h.proc.Pid, fd.Name()))
		names = append(names, fd.Name()+" -> "+target)
	}
	require.Len(t, names, 1, "the holder's fds: %v", names)
	assert.Regexp(t, `^0 -> socket:`, names[0])

	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", h.proc.Pid))
	require.NoError(t, err)
	assert.NotContains(t, string(maps), exe, "the holder maps fledge's binary")
	assert.LessOrEqual(t, strings.Count(string(maps), "\n"), 6, "the holder's mappings: %s", maps)
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", h.proc.Pid))
	require.NoError(t, err)
	assert.Contains(t, string(cmd), stub.PidNSMarker, "ps shows the holder as a holder")
}

// TestPidNamespaceGoHolderStillServes: where the forked holder cannot start (another
// architecture, a kernel that refuses its steps), the holder is fledge re-executed, and a
// command still sees its own namespace, with the holder as pid 1.
func TestPidNamespaceGoHolderStillServes(t *testing.T) {
	goHolder.Store(true)
	t.Cleanup(func() { goHolder.Store(false) })
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, sb)
	h := onlyHolder(t, sb)
	exe, err := os.Executable()
	require.NoError(t, err)
	got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", h.proc.Pid))
	require.NoError(t, err)
	assert.Equal(t, exe, got, "the holder is an exec of fledge")
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec(`tr '\0' ' ' < /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Contains(t, out, stub.PidNSMarker, "pid 1 is the holder")
}
