// SPDX-License-Identifier: MIT

package linux

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// runHostHelper is a small fledge host: it starts one sandboxed tree (a shell running
// sleep 45 in the foreground and the background, in a subshell, and setsid'd out of the
// process group) whose every process carries marker, says so, and waits to be killed.
func runHostHelper(launch, marker, dir string) int {
	viaLauncher := launch == "launcher"
	if viaLauncher {
		launch, launcherFirstForTest = LaunchThread, true
	}
	sb, err := New(Options{Launch: launch})
	if err != nil {
		fmt.Println("new:", err)
		return 1
	}
	d, err := os.Open(dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	// sleep runs under the marker's name, so every process of the tree carries it.
	script := `cp /bin/sleep "./$0" && { "./$0" 45 & setsid "./$0" 45 & sh -c '"./$0" 45; echo' "$0" & "./$0" 45; echo; }`
	p, err := sb.Start(context.Background(), &sandbox.Spec{
		Kind: sandbox.KindExec, Name: "hostdeath", Path: "/bin/sh", Args: []string{"sh", "-c", script, marker},
		Dir: d, DirPath: dir, Env: []string{"PATH=/usr/bin:/bin"},
		Access: sandbox.Access{ReadWrite: []string{dir}, ReadExec: SystemReadExec},
		Limits: sandbox.Limits{Timeout: time.Minute},
	})
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	lp := 0
	if viaLauncher {
		sb.launchers.mu.Lock()
		if l := sb.launchers.m[launcherKey("hostdeath", false)]; l != nil && p.(*process).viaLauncher {
			lp = l.proc.Pid
		}
		sb.launchers.mu.Unlock()
	}
	fmt.Println("started", p.Pid(), sb.Report().HostDeath, "launcher", lp)
	select {} // until kill -9
}

// TestNothingOutlivesAKilledHost: kill -9 of the host while a command runs `sleep 45`
// (with a child and a setsid'd grandchild) leaves no process of the tree alive a second
// later: the watchdog sees the host's socket close and kills the run's cgroups.
func TestNothingOutlivesAKilledHost(t *testing.T) {
	testutil.RequireContained(t)
	self, err := os.Executable()
	require.NoError(t, err)
	for _, launch := range []string{LaunchThread, LaunchStub, "launcher"} {
		t.Run(launch, func(t *testing.T) {
			m := marker(t)
			cmd := exec.Command(self, launch, m, t.TempDir())
			cmd.Env = append(os.Environ(), helperEnv+"=host")
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			line, err := bufio.NewReader(out).ReadString('\n')
			require.NoError(t, err, "host helper said %q", line)
			require.True(t, strings.HasPrefix(line, "started "), line)
			assert.Contains(t, line, " watchdog")
			// The whole tree is up: the helper host itself, the shell, the subshell and the
			// four sleeps carry the marker.
			deadline := time.Now().Add(waitBound)
			// (cp, which copies sleep under the marker's name, carries it for a moment too.)
			for len(treeOf(m)) < 7 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			require.Len(t, treeOf(m), 7, "tree started")
			holders := holdersOf(t, cmd.Process.Pid)
			if launch == "launcher" {
				// The session's launcher dies with the host too (its socket closes).
				f := strings.Fields(line)
				lp, _ := strconv.Atoi(f[len(f)-1])
				require.NotZero(t, lp, "the run did not go through a launcher: %q", line)
				holders = append(holders, lp)
			}
			if launch == LaunchThread {
				require.Len(t, holders, 1, "the run's pid namespace has its holder")
			}

			require.NoError(t, cmd.Process.Kill()) // SIGKILL: no cleanup code runs in the host
			_ = cmd.Wait()
			killed := time.Now()
			var left []int
			for {
				left = survivors(m)
				if len(left) == 0 || time.Since(killed) > time.Second {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			assert.Empty(t, left, "processes of the tree still alive 1 s after kill -9 of the host")
			for _, h := range holders {
				for time.Since(killed) < 2*time.Second && processAlive(h) {
					time.Sleep(10 * time.Millisecond)
				}
				assert.False(t, processAlive(h), "pid-namespace holder or session launcher %d outlived the host", h)
			}
		})
	}
}

// holdersOf lists the pid-namespace holders host started.
func holdersOf(t *testing.T, host int) []int {
	t.Helper()
	var out []int
	for _, pid := range testutil.ProcessesMatching("__fledge_sandbox_pidns__") {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == fmt.Sprint(host) {
			out = append(out, pid)
		}
	}
	return out
}

// processAlive: pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	return len(f) > 0 && f[0] != "Z"
}

// treeOf is survivors(m) without the cp that makes the marker's copy of sleep.
func treeOf(m string) []int {
	var out []int
	for _, pid := range survivors(m) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && !strings.HasPrefix(string(b), "cp\x00") {
			out = append(out, pid)
		}
	}
	return out
}
