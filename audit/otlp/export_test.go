// SPDX-License-Identifier: MIT

package otlp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/audit/otlp"
	"github.com/fledgehq/fledge/testkit/collectortest"
)

// The test binary turns into an exporting process (what a fledge process runs in the
// background) when this is set, so a test can kill it with -9 mid-export.
const (
	envExporterLog = "FLEDGE_OTLP_TEST_EXPORT_LOG"
	envExporterURL = "FLEDGE_OTLP_TEST_EXPORT_URL"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envExporterLog); path != "" {
		c, err := otlp.NewClient(otlp.Config{URL: os.Getenv(envExporterURL)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		e := otlp.NewExporter(path, c, otlp.Options{Interval: 5 * time.Millisecond})
		e.Start()
		time.Sleep(time.Minute) // until killed
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func openLog(t *testing.T, o audit.Options) (*audit.Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "audit.jsonl")
	if o.Fsync == "" {
		o.Fsync = audit.FsyncNever
	}
	l, err := audit.Open(path, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, path
}

// appendRecords writes n records spread over sessions, with every decision.
func appendRecords(t *testing.T, l *audit.Log, n int, sessions ...string) {
	t.Helper()
	decisions := []audit.Decision{audit.Allow, audit.Deny, audit.Error}
	for i := 0; i < n; i++ {
		r := &audit.Record{
			Session:  sessions[i%len(sessions)],
			Plugin:   &audit.PluginRef{Name: "demo", Version: "1.0.0"},
			Event:    audit.EventExecDecision,
			Decision: decisions[i%3],
			Reason:   "ok",
			Details:  map[string]any{"command": fmt.Sprintf("echo %d", i)},
		}
		require.NoError(t, l.Append(r, false))
	}
}

// lines returns every stored line by seq.
func lines(t *testing.T, path string) (map[uint64]string, []uint64) {
	t.Helper()
	out := map[uint64]string{}
	var order []uint64
	_, err := audit.ReadAfter(path, audit.Position{}, func(e audit.Entry) error {
		out[e.Record.Seq] = string(e.Line)
		order = append(order, e.Record.Seq)
		return nil
	})
	require.NoError(t, err)
	return out, order
}

// checkDelivery asserts every record of the log arrived at least once, as stored, and that
// each session's records arrived in order (the first arrival of each, since a resend after
// a failure repeats a batch). It returns how many arrived more than once.
func checkDelivery(t *testing.T, path string, got []collectortest.Got) int {
	t.Helper()
	want, order := lines(t, path)
	seen := map[uint64]int{}
	lastBySession := map[string]uint64{}
	for _, g := range got {
		seq := g.Seq()
		require.NotZero(t, seq, "a record without fledge.seq: %+v", g)
		seen[seq]++
		if seen[seq] > 1 {
			continue
		}
		require.Equal(t, want[seq], g.Body, "seq %d: the body is the line as stored", seq)
		s, _ := g.Attributes["fledge.session"].(string)
		require.Greater(t, seq, lastBySession[s], "session %q: seq %d arrived after %d", s, seq, lastBySession[s])
		lastBySession[s] = seq
	}
	dups := 0
	for _, seq := range order {
		require.NotZero(t, seen[seq], "seq %d never arrived", seq)
		dups += seen[seq] - 1
	}
	return dups
}

func TestExportEveryRecordAsOneLogRecord(t *testing.T) {
	for _, proto := range []string{otlp.ProtocolProtobuf, otlp.ProtocolJSON} {
		t.Run(proto, func(t *testing.T) {
			col := collectortest.Start(t)
			l, path := openLog(t, audit.Options{})
			appendRecords(t, l, 40, "s1", "s2")
			c, err := otlp.NewClient(otlp.Config{URL: col.URL(), Protocol: proto, ServiceVersion: "9.9.9"})
			require.NoError(t, err)
			e := otlp.NewExporter(path, c, otlp.Options{})
			n, err := e.Flush(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 40, n)

			got := col.Received()
			require.Len(t, got, 40)
			require.Zero(t, checkDelivery(t, path, got), "one round, nothing failed: exactly once")
			g := got[1]
			assert.Equal(t, "fledge", g.Resource["service.name"])
			assert.Equal(t, "9.9.9", g.Resource["service.version"])
			host, _ := os.Hostname()
			assert.Equal(t, host, g.Resource["host.name"])
			assert.Equal(t, "exec_decision", g.Attributes["fledge.event"])
			assert.Equal(t, "deny", g.Attributes["fledge.decision"])
			assert.Equal(t, "ok", g.Attributes["fledge.reason"])
			assert.Equal(t, "demo", g.Attributes["fledge.plugin"])
			assert.Equal(t, "s2", g.Attributes["fledge.session"])
			assert.EqualValues(t, 1007, g.Attributes["ocsf.class_uid"])
			assert.Equal(t, "Process Activity", g.Attributes["ocsf.class_name"])
			assert.Equal(t, "WARN", g.Severity)
			assert.Equal(t, otlp.ScopeName, g.Scope)

			// The cursor says all of it was acknowledged: a second round sends nothing.
			n, err = e.Flush(context.Background())
			require.NoError(t, err)
			assert.Zero(t, n)
			assert.Len(t, col.Received(), 40)
			st, err := otlp.ReadState(path)
			require.NoError(t, err)
			assert.EqualValues(t, 40, st.Acked.Seq)
			assert.Zero(t, st.Backlog)
		})
	}
}

// A collector killed (SIGKILL) in the middle of a stream of records and started again a
// while later: every record arrives, at least once, each session's in order.
func TestExportCollectorKilledMidStream(t *testing.T) {
	for _, proto := range []string{otlp.ProtocolProtobuf, otlp.ProtocolJSON} {
		t.Run(proto, func(t *testing.T) {
			col := collectortest.Start(t)
			// Rotation on: the stream crosses files while the exporter follows it.
			l, path := openLog(t, audit.Options{RotateBytes: 64 << 10, MaxTotalBytes: -1})
			c, err := otlp.NewClient(otlp.Config{URL: col.URL(), Protocol: proto, Timeout: 2 * time.Second})
			require.NoError(t, err)
			e := otlp.NewExporter(path, c, otlp.Options{Interval: 20 * time.Millisecond})
			e.Start()
			killed := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 60; i++ {
					if i == 30 {
						<-killed // the second half is written while the collector is down
					}
					appendRecords(t, l, 25, "a", "b", "c")
					time.Sleep(20 * time.Millisecond)
				}
			}()
			// Killed once the collector has taken part of the stream, however long a loaded
			// machine takes to send the first batch (a fixed 300 ms was often too short).
			deadline := time.Now().Add(30 * time.Second)
			for len(col.Received()) == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			before := len(col.Received())
			col.Kill()
			close(killed)
			time.Sleep(700 * time.Millisecond)
			col.Restart()
			wg.Wait()
			e.Close(20 * time.Second)

			got := col.Received()
			dups := checkDelivery(t, path, got)
			t.Logf("%s: %d received before the kill; %d records, %d arrived twice", proto, before, len(got)-dups, dups)
			require.Greater(t, before, 0, "the kill came before anything was sent: the test proves nothing")
			_, order := lines(t, path)
			require.Len(t, order, 1500)
		})
	}
}

// A fledge process killed with -9 while it exports: the next one sends what was not
// acknowledged, so nothing is lost.
func TestExportResumesAfterSIGKILL(t *testing.T) {
	col := collectortest.Start(t)
	l, path := openLog(t, audit.Options{RotateBytes: 256 << 10, MaxTotalBytes: -1})
	appendRecords(t, l, 20000, "x", "y")
	_, order := lines(t, path)

	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), envExporterLog+"="+path, envExporterURL+"="+col.URL())
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	var cur audit.Position
	deadline := time.Now().Add(30 * time.Second)
	for cur.Seq == 0 && time.Now().Before(deadline) {
		cur, _ = audit.ReadCursor(path)
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	cur, err = audit.ReadCursor(path)
	require.NoError(t, err)
	require.NotZero(t, cur.Seq, "the exporter acknowledged nothing within 30s")
	require.Less(t, cur.Seq, order[len(order)-1], "killed after the whole log was sent: the test proves nothing")
	t.Logf("killed with the cursor at seq %d of %d; %d records received by then", cur.Seq, len(order), len(col.Received()))

	// The next process: its lock is free again (the kernel dropped the dead one's flock).
	c, err := otlp.NewClient(otlp.Config{URL: col.URL()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = otlp.NewExporter(path, c, otlp.Options{}).Flush(ctx)
	require.NoError(t, err)
	dups := checkDelivery(t, path, col.Received())
	t.Logf("after the restart: every record arrived; %d twice (the batch in flight at the kill)", dups)
	require.LessOrEqual(t, dups, otlp.MaxBatchRecords, "more than the batch in flight was sent again")
}

// Records the log pruned (its own retention) before the exporter sent them are named in an
// export_gap record, which is exported too; nothing is silently skipped.
func TestExportGapRecordedWhenPruned(t *testing.T) {
	col := collectortest.Start(t)
	l, path := openLog(t, audit.Options{RotateBytes: 4096, MaxRecordBytes: audit.MinRecordBytes, MaxTotalBytes: 2 * (4096 + audit.MinRecordBytes)})
	appendRecords(t, l, 5, "p")
	c, err := otlp.NewClient(otlp.Config{URL: col.URL()})
	require.NoError(t, err)
	appendGap := func(r *audit.Record) error { return l.Append(r, true) }
	ob, err := audit.AcquireOutbox(path, time.Second)
	require.NoError(t, err)
	n, err := otlp.Drain(context.Background(), path, ob, c, appendGap)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	// The collector is away while the log rotates and prunes far past the cursor.
	appendRecords(t, l, 600, "p")
	_, order := lines(t, path)
	require.Greater(t, order[0], uint64(6), "nothing was pruned: the test proves nothing")
	n, err = otlp.Drain(context.Background(), path, ob, c, appendGap)
	require.NoError(t, err)
	ob.Release()
	require.Greater(t, n, 0, "nothing was sent after the gap")

	got := col.Received()
	var gap *collectortest.Got
	for i := range got {
		if got[i].Attributes["fledge.event"] == audit.EventExportGap {
			gap = &got[i]
		}
	}
	require.NotNil(t, gap, "no export_gap record reached the collector")
	_, kept := lines(t, path)
	var gr *audit.Record
	require.NoError(t, audit.Query(path, audit.Filter{Event: audit.EventExportGap}, func(r *audit.Record) error { gr = r; return nil }))
	require.NotNil(t, gr)
	first, _ := gr.Details[audit.DetailGapFirstSeq].(json.Number)
	assert.Equal(t, "6", first.String())
	last, _ := gr.Details[audit.DetailGapLastSeq].(json.Number)
	assert.Equal(t, strconv.FormatUint(kept[0]-1, 10), last.String(), "the gap ends right before the oldest kept record")
	// Everything kept after the gap arrived too.
	seen := map[uint64]bool{}
	for _, g := range got {
		seen[g.Seq()] = true
	}
	for _, seq := range kept {
		require.True(t, seen[seq], "kept seq %d never arrived", seq)
	}
}

// A log deleted and begun again (its seqs start over) is sent whole: the old cursor, ahead
// of every record, does not hold the new records back.
func TestExportLogBegunAgain(t *testing.T) {
	col := collectortest.Start(t)
	l, path := openLog(t, audit.Options{})
	appendRecords(t, l, 10, "old")
	c, err := otlp.NewClient(otlp.Config{URL: col.URL()})
	require.NoError(t, err)
	e := otlp.NewExporter(path, c, otlp.Options{})
	_, err = e.Flush(context.Background())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	matches, err := filepath.Glob(path + "*")
	require.NoError(t, err)
	for _, m := range matches {
		if m != audit.CursorPath(path) {
			require.NoError(t, os.Remove(m))
		}
	}
	l2, err := audit.Open(path, audit.Options{Fsync: audit.FsyncNever})
	require.NoError(t, err)
	defer l2.Close()
	appendRecords(t, l2, 3, "new")
	st, err := otlp.ReadState(path)
	require.NoError(t, err)
	require.Equal(t, 3, st.Backlog)
	n, err := e.Flush(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, n)
	got := col.Received()
	require.Len(t, got, 13)
	assert.Equal(t, "new", got[12].Attributes["fledge.session"])
}

// Two senders of one log (two fledge processes: each opens the lock file itself, and flock
// locks belong to the open file) share the cursor: every record is sent, none twice.
func TestExportTwoSendersShareTheCursor(t *testing.T) {
	col := collectortest.Start(t)
	l, path := openLog(t, audit.Options{})
	c, err := otlp.NewClient(otlp.Config{URL: col.URL()})
	require.NoError(t, err)
	a := otlp.NewExporter(path, c, otlp.Options{Interval: 5 * time.Millisecond})
	b := otlp.NewExporter(path, c, otlp.Options{Interval: 7 * time.Millisecond})
	a.Start()
	b.Start()
	for i := 0; i < 30; i++ {
		appendRecords(t, l, 20, "one", "two")
		time.Sleep(5 * time.Millisecond)
	}
	a.Close(10 * time.Second)
	b.Close(10 * time.Second)
	got := col.Received()
	require.Zero(t, checkDelivery(t, path, got), "a record was sent twice")
	require.Len(t, got, 600)
}
