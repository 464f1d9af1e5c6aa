// SPDX-License-Identifier: MIT

package audit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSharedSyncForgetsKilledProcess: a real process appending durable records is
// SIGKILLed with the log open (it never closes it). The next process alone on the log
// counts itself alone (no leader lock, no waiting for a leader that is gone), and the
// processes after it still share fsyncs: fewer fsyncs than durable records, the log whole.
// Before, the page's count of open processes kept the killed one forever.
func TestSharedSyncForgetsKilledProcess(t *testing.T) {
	path := testPath(t)
	requireSharedPage(t, path)

	victim := writerCmd(t, path, 0, envFsync+"=durable", envRotate+"=-1")
	out, err := victim.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, victim.Start())
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("writer said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		_ = victim.Process.Kill()
		t.Fatal("the writer did not start within 30s")
	}
	require.NoError(t, victim.Process.Kill()) // SIGKILL: no Close, no count taken back
	_ = victim.Wait()

	l, err := Open(path, Options{Fsync: FsyncDurable, RotateBytes: -1, MaxTotalBytes: -1})
	require.NoError(t, err)
	require.NotNil(t, l.share, "the page is shared on this filesystem")
	require.NoError(t, l.Append(testRecord(1), true))
	require.False(t, l.share.others(), "a process killed with the log open still counts as holding it")
	require.NoError(t, l.Close())

	fsyncs, records := appendersShare(t, path, 6, 40)
	t.Logf("after the kill: %d durable records, %d fsyncs", records, fsyncs)
	require.Less(t, fsyncs, records, "the processes' records share fsyncs")
}

// appendersShare runs procs real appender processes (TestAppenderProcess) at once on path
// and returns the fsyncs they ran and the durable records they wrote; the log verifies.
func appendersShare(t *testing.T, path string, procs, each int) (fsyncs, records int) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	before := 0
	if rep, err := Verify(path); err == nil {
		before = rep.Records
	}
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
	for p := range procs {
		require.NoError(t, errs[p], outs[p])
		i := strings.Index(outs[p], "fsyncs=")
		require.GreaterOrEqual(t, i, 0, outs[p])
		n, err := strconv.Atoi(strings.Fields(outs[p][i+len("fsyncs="):])[0])
		require.NoError(t, err)
		fsyncs += n
	}
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	require.Equal(t, before+procs*each, rep.Records)
	return fsyncs, procs * each
}

// TestSharedPageTruncatedKeepsLogging: another process of the same user truncates
// audit.jsonl.sync (by hand, or logrotate's copytruncate) under a process appending durable
// records. The appender (a real process) goes on: every record is on disk and the log
// verifies; the next processes make the page anew and share fsyncs again. Before, the
// appender's next durable append touched its mapped page past the file's end and died of
// SIGBUS.
func TestSharedPageTruncatedKeepsLogging(t *testing.T) {
	path := testPath(t)
	requireSharedPage(t, path)
	truncate, err := exec.LookPath("truncate")
	if err != nil {
		t.Skip("no truncate(1) to cut the page with")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^TestTruncatedPageAppender$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "FLEDGE_AUDIT_TRUNCATED="+path, "FLEDGE_AUDIT_TRUNCATE="+truncate)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "the appender whose page was cut:\n%s", b)
	require.Contains(t, string(b), "appended=20")

	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	require.Equal(t, 20, rep.Records)
	fi, err := os.Stat(path + SyncSuffix)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "nothing opened the log since the cut")

	fsyncs, records := appendersShare(t, path, 6, 40)
	t.Logf("after the cut: %d durable records, %d fsyncs", records, fsyncs)
	require.Less(t, fsyncs, records, "the processes' records share fsyncs again")
}

// TestTruncatedPageAppender is TestSharedPageTruncatedKeepsLogging's appender (skipped when
// run directly): ten durable records, the page cut by truncate(1), ten more.
func TestTruncatedPageAppender(t *testing.T) {
	path := os.Getenv("FLEDGE_AUDIT_TRUNCATED")
	if path == "" {
		t.Skip("run by TestSharedPageTruncatedKeepsLogging")
	}
	l, err := Open(path, Options{Fsync: FsyncDurable, RotateBytes: -1, MaxTotalBytes: -1})
	require.NoError(t, err)
	n := 0
	for i := range 10 {
		require.NoError(t, l.Append(testRecord(i), true))
		n++
	}
	out, err := exec.Command(os.Getenv("FLEDGE_AUDIT_TRUNCATE"), "-s", "0", path+SyncSuffix).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for i := range 10 {
		r := testRecord(10 + i)
		if i%2 == 0 {
			require.NoError(t, l.Append(r, true))
		} else {
			sync, err := l.AppendDeferredSync(r)
			require.NoError(t, err)
			require.NoError(t, sync())
		}
		n++
	}
	require.NoError(t, l.Close())
	fmt.Printf("appended=%d\n", n)
}
