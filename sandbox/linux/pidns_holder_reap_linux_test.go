// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// childrenOf lists the pids whose parent is pid, with their states (from the host's /proc).
func childrenOf(t *testing.T, pid int) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	kids := map[int]string{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids[p] = f[0]
		}
	}
	return kids
}

// TestPidNamespaceHolderReapsOrphans: every orphan of a plugin's namespace is the holder's
// child, and a holder that left them unreaped would let a command fill its namespace, and
// its pids limit, with zombies: the next fork refused, for the command and for every later
// run of the plugin. 300 orphans that exit, made by a run held to 32 processes, all fork;
// none is left as a zombie under the holder; and the next run starts.
func TestPidNamespaceHolderReapsOrphans(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, sb)
	h := onlyHolder(t, sb)
	e := newEnv(t)
	spec := e.spec(`i=0; while [ $i -lt 300 ]; do sh -c 'true & exit 0' || { echo "fork $i refused"; exit 1; }; i=$((i+1)); done; echo made`)
	spec.Limits.Pids = 32
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, "made\n", out)
	var zombies []int
	for range 100 {
		zombies = zombies[:0]
		for p, st := range childrenOf(t, h.proc.Pid) {
			if st == "Z" {
				zombies = append(zombies, p)
			}
		}
		if len(zombies) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.Empty(t, zombies, "zombies left under the holder")
	res, out, errOut = run(t, sb, e.spec(`echo next`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, "next\n", out)
}

// openFDs counts this process's open fds, but for Landlock rulesets: those are kept by
// their own cache (kernel, at most 16), one per sandbox's policy.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:[landlock-ruleset]" {
			n++
		}
	}
	return n
}

// TestSandboxStartsLeakNothing: a sandbox's start makes an idmapping namespace (a forked
// child, killed and reaped) and, made ahead (Prestart), a pid-namespace holder (a forked
// child, ended with the sandbox). 1000 starts and closes, one in 100 with a run, leave no
// child of this process, no zombie, no more fds, and no holder of theirs running.
func TestSandboxStartsLeakNothing(t *testing.T) {
	testutil.RequireContained(t)
	if testing.Short() {
		t.Skip("1000 sandbox starts")
	}
	first := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, first)
	// One project for every run: its Landlock ruleset is made once and cached.
	e := newEnv(t)
	res, out, errOut := run(t, first, e.spec(`true`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	fds, kids := openFDs(t), childrenOf(t, os.Getpid())
	for i := range 1000 {
		sb, err := New(Options{Launch: LaunchThread, Prestart: true})
		require.NoError(t, err, "start %d", i)
		if i%100 == 0 {
			// Every tenth start its holder is taken and used by a run too.
			res, out, errOut := run(t, sb, e.spec(`true`))
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		}
		require.NoError(t, sb.Close(), "close %d", i)
	}
	// Children of this process that were not there before the starts (zombies among
	// them): none, once the last close's holder has exited.
	var left map[int]string
	for range 200 {
		left = map[int]string{}
		for p, st := range childrenOf(t, os.Getpid()) {
			if _, ok := kids[p]; !ok {
				left[p] = st
			}
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.Empty(t, left, "children left after 1000 starts (pid: state)")
	if !assert.LessOrEqual(t, openFDs(t), fds+2, "fds after 1000 starts (%d before)", fds) {
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			t.Log(e.Name(), l)
		}
	}
}

// TestPidNamespaceEndsWithSandboxWhenHolderStopped: a holder reads its socket until
// fledge's end closes, then exits, and its namespace with it. A process outside the
// namespace with the holder's uid (here a command of another sandbox without a pid
// namespace or Landlock, which sees the host's pids) can stop it with SIGSTOP; a stopped
// holder reads nothing. Closing the sandbox must still end the holder and whatever runs in
// its namespace, the forked holder and the Go one alike.
func TestPidNamespaceEndsWithSandboxWhenHolderStopped(t *testing.T) {
	testutil.RequireContained(t)
	for _, goH := range []bool{false, true} {
		name := "forked"
		if goH {
			name = "go"
		}
		t.Run(name, func(t *testing.T) {
			goHolder.Store(goH)
			t.Cleanup(func() { goHolder.Store(false) })
			holderEndsWhenStopped(t)
		})
	}
}

// holderEndsWhenStopped is TestPidNamespaceEndsWithSandboxWhenHolderStopped with the
// holder goHolder picks.
func holderEndsWhenStopped(t *testing.T) {
	sb, err := New(Options{Launch: LaunchThread})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = sb.Close()
		}
	})
	requirePidNS(t, sb)
	h := onlyHolder(t, sb)
	holder := h.proc.Pid
	t.Cleanup(func() { _ = h.proc.Kill() })
	outside := newSandbox(t, Options{Launch: LaunchThread, DisableLandlock: true, DisablePidNS: true})
	e := newEnv(t)
	res, out, errOut := run(t, outside, e.spec(`kill -STOP "$0" && echo stopped`, strconv.Itoa(holder)))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.Equal(t, "stopped\n", out)
	for range 100 {
		if procState(holder) == "T" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, "T", procState(holder), "the holder was not stopped")
	require.NoError(t, sb.Close())
	closed = true
	st := procState(holder)
	for i := 0; i < 200 && st != "" && st != "Z"; i++ {
		time.Sleep(10 * time.Millisecond)
		st = procState(holder)
	}
	assert.Contains(t, []string{"", "Z"}, st, "the stopped holder outlived its sandbox's close")
}

// procState is the state letter of pid ("": no such process).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
