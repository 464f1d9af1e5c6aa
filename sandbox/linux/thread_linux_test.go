// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// confinedThreads lists host threads still carrying a launch's confinement
// (no_new_privs set, or a fledge run cgroup).
func confinedThreads(t *testing.T) []string {
	ents, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	var bad []string
	for _, e := range ents {
		st, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		cg, _ := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "cgroup"))
		if strings.Contains(string(st), "NoNewPrivs:\t1") || strings.Contains(string(cg), "/fledge-bench") ||
			strings.Contains(string(cg), "/fledge-test") {
			bad = append(bad, e.Name())
		}
	}
	return bad
}

// TestHostThreadsStayUnconfined: the thread launcher confines a throwaway thread; no host
// thread may keep that state, and the host keeps full access while launches run.
func TestHostThreadsStayUnconfined(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireLandlock(t, sb)
	e := newEnv(t)
	key := filepath.Join(e.home, ".ssh", "id_rsa")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	readErrs := make(chan error, 1)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := os.ReadFile(key); err != nil {
					select {
					case readErrs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		spec := e.spec("true")
		spec.Limits.Pids = 16
		res, _, _ := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-readErrs:
		t.Fatalf("a host goroutine lost file access: %v", err)
	default:
	}
	// A parked spare launch thread sits in the next run's groups (unconfined) until
	// Close releases it back to the host's groups.
	require.NoError(t, sb.Close())
	// Launch threads exit asynchronously; give them a bounded moment.
	deadline := time.Now().Add(10 * time.Second)
	for len(confinedThreads(t)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.Empty(t, confinedThreads(t))
	// The host's own cwd is untouched by the launch threads' fchdir.
	wd, err := os.Getwd()
	require.NoError(t, err)
	assert.NotEqual(t, e.project, wd)
}
