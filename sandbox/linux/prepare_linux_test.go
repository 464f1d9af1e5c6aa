// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// TestPrepareHolderServesOneSession: the pid-namespace holder started ahead (Prepare) goes to
// one plugin only. Two plugins' first runs race for it; a long-running command of the one is
// invisible to the other, and visible to the same plugin's next run.
func TestPrepareHolderServesOneSession(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("started with New %v", early), func(t *testing.T) { testPrepareHolderServesOne(t, early) })
	}
}

func testPrepareHolderServesOne(t *testing.T, early bool) {
	sb := newSandbox(t, Options{Launch: LaunchThread, Prestart: early})
	requirePidNS(t, sb)
	e := newEnv(t)
	sb.Prepare(nil)

	specs := map[string]*sandbox.Spec{}
	for _, name := range []string{"first plugin", "second plugin"} {
		s := e.spec(`echo started; exec sleep 30`)
		s.Name = name
		specs[name] = s
	}
	var wg sync.WaitGroup
	procs := make(chan sandbox.Process, len(specs))
	for _, s := range specs {
		w := &lineWaiter{want: "started", ch: make(chan struct{})}
		s.Stdout = w
		wg.Go(func() {
			p, err := sb.Start(context.Background(), s)
			if !assert.NoError(t, err) {
				return
			}
			procs <- p
			select {
			case <-w.ch:
			case <-time.After(20 * time.Second):
				t.Errorf("%s: the long command did not start", s.Name)
			}
		})
	}
	wg.Wait()
	close(procs)
	for p := range procs {
		t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
	}
	require.False(t, t.Failed())

	look := `n=0; for i in $(seq 100); do n=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep); [ "$n" -ge 1 ] && break; sleep 0.05; done; echo "$n"`
	for name := range specs {
		s := e.spec(look)
		s.Name = name
		_, out, errOut := run(t, sb, s)
		assert.Equal(t, "1", strings.TrimSpace(out), "%s sees exactly its own sleep, not the other plugin's: %s", name, errOut)
	}
	other := e.spec(`cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep; true`)
	other.Name = "a third plugin"
	_, out, _ := run(t, sb, other)
	assert.Equal(t, "0", strings.TrimSpace(out), "a plugin with no run sees none of the others'")
}

// TestPrepareThenCloseLeavesNothing: what Prepare starts (the watchdog, a holder made ahead,
// the first run's spare and its groups) ends with the sandbox, even when Close comes before
// any of it is ready, and a Prepare after Close starts nothing.
func TestPrepareThenCloseLeavesNothing(t *testing.T) {
	for _, c := range []struct {
		early, prepare, named bool
		wait                  time.Duration
	}{{true, false, false, 0}, {false, true, false, 0}, {true, true, true, 0}, {false, true, true, 300 * time.Millisecond}} {
		t.Run(fmt.Sprintf("early %v prepare %v named %v after %v", c.early, c.prepare, c.named, c.wait), func(t *testing.T) {
			sb, err := New(Options{Launch: LaunchThread, Prestart: c.early})
			require.NoError(t, err)
			requirePidNS(t, sb)
			name := fmt.Sprintf("prepared-%d-%v-%v-%v", os.Getpid(), c.early, c.named, c.wait)
			spec := &sandbox.Spec{Name: name, Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 64}}
			switch {
			case c.prepare && c.named:
				sb.Prepare(spec)
			case c.prepare:
				sb.Prepare(nil)
			}
			time.Sleep(c.wait)
			require.NoError(t, sb.Close())
			sb.Prepare(spec)
			deadline := time.Now().Add(5 * time.Second)
			for {
				left := append(helperChildren(t), preparedGroups(sb, name)...)
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("left behind by a closed sandbox: %v", left)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// helperChildren lists this process's children that are a holder or a watchdog.
func helperChildren(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st := string(b)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+2:])
		if len(f) < 2 || f[1] != self || f[0] == "Z" {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if c := string(cmd); strings.Contains(c, stub.PidNSMarker) || strings.Contains(c, stub.WatchdogMarker) {
			out = append(out, e.Name()+" "+strings.ReplaceAll(c, "\x00", " "))
		}
	}
	return out
}

// preparedGroups lists the run cgroups of sandbox name that exist now.
func preparedGroups(sb *Sandbox, name string) []string {
	prefix := "fledge-" + sandbox.SafeName(name) + "-"
	parents := []string{sb.cg.unified}
	for _, d := range sb.cg.v1 {
		parents = append(parents, d)
	}
	var out []string
	for _, p := range parents {
		if p == "" {
			continue
		}
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				out = append(out, "cgroup "+filepath.Join(p, e.Name()))
			}
		}
	}
	return out
}
