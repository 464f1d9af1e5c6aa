// SPDX-License-Identifier: MIT

package audit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupCommitAcrossProcesses: eight Logs on one file (eight fledge processes: each its
// own descriptors, locks and in-process group), one appender each, durable records one
// after another with a slow fsync. Their fsyncs are shared: far fewer run than records,
// every durable Append that returned nil was covered by an fsync that started after its
// write (whoever ran it), and the log verifies.
func TestGroupCommitAcrossProcesses(t *testing.T) {
	path := testPath(t)
	requireSharedPage(t, path)
	opts := Options{Fsync: FsyncDurable, RotateBytes: 32 << 10, MaxTotalBytes: -1}
	w := newSyncWitness(2 * time.Millisecond)
	const procs, each = 8, 30
	logs := make([]*Log, procs)
	for i := range logs {
		l, err := Open(path, opts)
		require.NoError(t, err)
		w.install(l)
		logs[i] = l
	}
	var wg sync.WaitGroup
	var bad sync.Map
	for p, l := range logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := testRecord(i)
				r.Session = fmt.Sprintf("proc-%d", p)
				if i%2 == 0 {
					if err := l.Append(r, true); err != nil {
						bad.Store(r.Session+fmt.Sprint(i), err.Error())
						continue
					}
				} else {
					sync, err := l.AppendDeferredSync(r)
					if err == nil {
						err = sync()
					}
					if err != nil {
						bad.Store(r.Session+fmt.Sprint(i), err.Error())
						continue
					}
				}
				if !w.isSynced(r.Hash) {
					bad.Store(r.Session+fmt.Sprint(i), "reported durable before an fsync covered it")
				}
			}
		}()
	}
	wg.Wait()
	bad.Range(func(k, v any) bool { t.Errorf("%v: %v", k, v); return true })
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	w.mu.Lock()
	calls := w.calls
	w.mu.Unlock()
	t.Logf("%d durable records, %d fsyncs", procs*each, calls)
	require.Less(t, calls, procs*each/2, "the processes' records share fsyncs")

	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	require.Equal(t, procs*each, rep.Records)
	require.Greater(t, len(rep.Files), 1, "the run rotated the log")
}

// TestGroupCommitAcrossRealProcesses: the same with real processes (this test binary
// re-executed as an appender): each reports its records durable only after an fsync that
// started after the write, whichever process ran it. What is checked: the log verifies with
// every record of every process, and fewer fsyncs ran than durable records (counted by each
// process and reported on its stdout).
func TestGroupCommitAcrossRealProcesses(t *testing.T) {
	path := testPath(t)
	requireSharedPage(t, path)
	exe, err := os.Executable()
	require.NoError(t, err)
	const procs, each = 6, 40
	var wg sync.WaitGroup
	outs := make([]string, procs)
	errs := make([]error, procs)
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(exe, "-test.run=^TestAppenderProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "FLEDGE_AUDIT_APPENDER="+path, "FLEDGE_AUDIT_APPENDER_N="+strconv.Itoa(each), "FLEDGE_AUDIT_APPENDER_ID="+strconv.Itoa(p))
			b, err := cmd.CombinedOutput()
			outs[p], errs[p] = string(b), err
		}()
	}
	wg.Wait()
	fsyncs := 0
	for p := range procs {
		require.NoError(t, errs[p], outs[p])
		i := strings.Index(outs[p], "fsyncs=")
		require.GreaterOrEqual(t, i, 0, outs[p])
		n, err := strconv.Atoi(strings.Fields(outs[p][i+len("fsyncs="):])[0])
		require.NoError(t, err)
		fsyncs += n
	}
	t.Logf("%d durable records, %d fsyncs", procs*each, fsyncs)
	require.Less(t, fsyncs, procs*each, "the processes' records share fsyncs")
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	require.Equal(t, procs*each, rep.Records)
	_, err = os.Stat(filepath.Clean(path + SyncSuffix))
	require.NoError(t, err, "the shared page beside the log")
}

// TestAppenderProcess is the appender TestGroupCommitAcrossRealProcesses runs in each
// process (skipped when run directly).
func TestAppenderProcess(t *testing.T) {
	path := os.Getenv("FLEDGE_AUDIT_APPENDER")
	if path == "" {
		t.Skip("run by TestGroupCommitAcrossRealProcesses")
	}
	n, err := strconv.Atoi(os.Getenv("FLEDGE_AUDIT_APPENDER_N"))
	require.NoError(t, err)
	l, err := Open(path, Options{Fsync: FsyncDurable, MaxTotalBytes: -1, RotateBytes: -1})
	require.NoError(t, err)
	w := newSyncWitness(time.Millisecond)
	w.install(l)
	for i := range n {
		r := testRecord(i)
		r.Session = "proc-" + os.Getenv("FLEDGE_AUDIT_APPENDER_ID")
		require.NoError(t, l.Append(r, true))
		// Another process's fsync may have covered it: then this witness did not see it,
		// but the file must hold it already (it was written before Append returned).
	}
	require.NoError(t, l.Close())
	w.mu.Lock()
	fmt.Printf("fsyncs=%d\n", w.calls)
	w.mu.Unlock()
}

// requireSharedPage skips where the log's directory is on no local filesystem (the page is
// not shared there by design: openShared).
func requireSharedPage(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	s := openShared(path + SyncSuffix)
	if s == nil {
		t.Skipf("%s is not on a local filesystem: processes sync alone there", filepath.Dir(path))
	}
	s.close()
	require.NoError(t, os.Remove(path+SyncSuffix))
}
