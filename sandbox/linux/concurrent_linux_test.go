// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestViewConcurrentLaunches runs many commands at once through the real sandbox with the
// private view, each granted a single file (a file mount point in the view's root). A race
// made concurrent launches fail while a lone one worked: the mount point was created
// through an fd opened for writing, which another launch thread's fork or private fd
// table kept open, so making the view's root read-only failed with EBUSY. Every command
// must start, see its own argument and read the granted file.
func TestViewConcurrentLaunches(t *testing.T) {
	const (
		total    = 32
		parallel = 8
	)
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			requireView(t, sb)
			e := newEnv(t)
			granted := filepath.Join(e.home, "granted.txt")
			require.NoError(t, os.WriteFile(granted, []byte("granted file\n"), 0o644))

			type outcome struct {
				code     int
				out, err string
				startErr error
			}
			results := make([]outcome, total)
			sem := make(chan struct{}, parallel)
			var wg sync.WaitGroup
			for i := range total {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					spec := e.spec(`true && echo "run $1" && cat "$2"`, "sh", strconv.Itoa(i), granted)
					spec.Access.ReadOnly = []string{granted}
					var out, errb bytes.Buffer
					spec.Stdout, spec.Stderr = &out, &errb
					p, err := sb.Start(context.Background(), spec)
					if err != nil {
						results[i] = outcome{startErr: err}
						return
					}
					res, err := p.Wait()
					if err != nil {
						results[i] = outcome{startErr: err}
						return
					}
					results[i] = outcome{code: res.ExitCode, out: out.String(), err: errb.String()}
				}()
			}
			wg.Wait()
			for i, r := range results {
				if !assert.NoError(t, r.startErr, "run %d", i) {
					continue
				}
				assert.Equal(t, 0, r.code, "run %d: stderr %q", i, r.err)
				assert.Equal(t, fmt.Sprintf("run %d\ngranted file\n", i), r.out, "run %d: stderr %q", i, r.err)
			}
		})
	}
}
