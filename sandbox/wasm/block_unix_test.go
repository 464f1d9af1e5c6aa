// SPDX-License-Identifier: MIT

//go:build unix

package wasm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/wasm"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// blockHangLimit only catches a run that never ends (the attack succeeding); nothing here
// measures speed.
const blockHangLimit = 20 * time.Second

// TestFIFOInPreopenCannotBlockTheHost: a module opens FIFOs in its preopens (one in the
// project, as a checkout can hold; one in the data dir, as its own exec can mkfifo). Opened
// as asked, open(2) blocks in fledge's process until the other end opens, and no deadline
// or signal reaches it. Each open must fail at once; the run ends by itself.
func TestFIFOInPreopenCannotBlockTheHost(t *testing.T) {
	f := newFixture(t, "probe", protocol.Capabilities{Filesystem: "project"})
	projFIFO := filepath.Join(f.project, "fifo")
	dataFIFO := filepath.Join(f.dataDir, "fifo")
	require.NoError(t, syscall.Mkfifo(projFIFO, 0o644))
	require.NoError(t, syscall.Mkfifo(dataFIFO, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(f.project, "marker.txt"), []byte("x"), 0o644))

	// Positive control: the same open from the host blocks (until the test opens the
	// other end to release it).
	opened := make(chan struct{})
	go func() {
		if h, err := os.Open(projFIFO); err == nil {
			h.Close()
		}
		close(opened)
	}()
	select {
	case <-opened:
		t.Fatal("control: opening a FIFO without a writer returned at once")
	case <-time.After(300 * time.Millisecond):
	}
	w, err := os.OpenFile(projFIFO, os.O_WRONLY, 0)
	require.NoError(t, err)
	<-opened
	w.Close()

	// Compiled first (into the fixture's cache, as install does): the hang limit is for the
	// run, not for a compile that takes minutes under the race detector.
	pre, err := wasm.New(f.wopts)
	require.NoError(t, err)
	require.NoError(t, pre.Precompile(context.Background(), f.opts.Program))
	require.NoError(t, pre.Close())

	type ran struct {
		out *fledgev1.Outcome
		err error
	}
	done := make(chan ran, 1)
	go func() {
		out, err := f.run("fifo")
		done <- ran{out, err}
	}()
	select {
	case o := <-done:
		require.NoError(t, o.err, "stderr:\n%s", f.stderr.String())
		assert.Equal(t, 0, o.out.ExitCode)
	case <-time.After(blockHangLimit):
		// Release the blocked opens so the test binary can end.
		for _, p := range []string{projFIFO, dataFIFO} {
			if h, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
				defer h.Close()
			}
		}
		t.Fatalf("the run did not end: a FIFO open blocked in the host; stdout:\n%s", f.stdout.String())
	}
	r := f.report()
	t.Logf("guest report: %v", r)
	assert.Equal(t, "ok", r["read /project/marker.txt"], "a regular file beside them opens")
	for _, k := range []string{"read /project/fifo", "write /plugin/fifo", "read /plugin/fifo"} {
		assert.Contains(t, strings.ToLower(fmt.Sprint(r[k])), "permission denied", k)
	}
}

// TestBlockedHostWriteDoesNotOutliveTheDeadline: the module's output goes to a pipe nobody
// reads (a session stuck elsewhere), so its write blocks in the host, where closing the
// module's context does not reach. The run must still end at its deadline, reported as a
// timeout, with the blocked call left behind. Both a pipe Go's poller watches and a plain
// blocking one (a write(2) asleep in the kernel).
func TestBlockedHostWriteDoesNotOutliveTheDeadline(t *testing.T) {
	for _, kind := range []string{"pollable pipe", "blocking pipe"} {
		t.Run(kind, func(t *testing.T) {
			var r, w *os.File
			if kind == "pollable pipe" {
				var err error
				r, w, err = os.Pipe()
				require.NoError(t, err)
			} else {
				var fds [2]int
				require.NoError(t, syscall.Pipe(fds[:]))
				r, w = os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
			}
			// Closing the read end at the end releases the write left blocked.
			t.Cleanup(func() { r.Close() })
			defer w.Close()

			wh, err := wasm.New(wasm.Options{Timeout: time.Second, CacheDir: filepath.Join(guestDir, "cache")})
			require.NoError(t, err)
			t.Cleanup(func() { _ = wh.Close() })
			path := guest(t, "probe")
			stderr := &testutil.SyncBuffer{}
			spec := &sandbox.Spec{Kind: sandbox.KindPlugin, Name: "t", Path: path, Args: []string{path},
				Stdin:  strings.NewReader(`{"type":"init","protocol":"fledge-v1","args":["flood"]}` + "\n"),
				Stdout: w, Stderr: stderr}
			start := time.Now()
			p, err := wh.Start(context.Background(), spec)
			require.NoError(t, err)
			res := waitWithin(t, p, blockHangLimit)
			t.Logf("ended after %v: %+v; stderr: %s", time.Since(start), res, stderr.String())
			assert.True(t, res.TimedOut, "a timeout, as the deadline ended it")
			assert.Contains(t, stderr.String(), "did not return after the module was stopped")
		})
	}
}

func waitWithin(t *testing.T, p sandbox.Process, limit time.Duration) *sandbox.Result {
	t.Helper()
	done := make(chan *sandbox.Result, 1)
	go func() {
		r, _ := p.Wait()
		done <- r
	}()
	select {
	case r := <-done:
		require.NotNil(t, r)
		return r
	case <-time.After(limit):
		t.Fatalf("the module did not end within %v of its start", limit)
		return nil
	}
}

// TestModuleThatIsAFIFOIsRefused: a FIFO where the module should be would block the read of
// the module itself, before any deadline exists. It is refused as not a regular file.
func TestModuleThatIsAFIFOIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.wasm")
	require.NoError(t, syscall.Mkfifo(path, 0o644))
	wh, err := wasm.New(wasm.Options{})
	require.NoError(t, err)
	defer wh.Close()
	done := make(chan error, 1)
	go func() {
		_, err := wh.Start(context.Background(), &sandbox.Spec{Kind: sandbox.KindPlugin, Name: "t", Path: path, Args: []string{path}})
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, wasm.ErrModule)
		assert.ErrorContains(t, err, "not a regular file")
	case <-time.After(blockHangLimit):
		if h, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			h.Close()
		}
		t.Fatal("reading the module blocked on a FIFO")
	}
}
