// SPDX-License-Identifier: MIT

package audit

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// followed collects what Follow hands out, with when it arrived.
type followed struct {
	mu   sync.Mutex
	recs []*Record
	at   []time.Time
}

func (f *followed) add(r *Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs, f.at = append(f.recs, r), append(f.at, time.Now())
	return nil
}

func (f *followed) snapshot() ([]*Record, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Record(nil), f.recs...), append([]time.Time(nil), f.at...)
}

func startFollow(t *testing.T, path string, flt Filter) *followed {
	t.Helper()
	got := &followed{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, path, flt, FollowOptions{}, got.add) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Follow did not end when its context did")
		}
	})
	return got
}

// TestFollowOtherProcess: records another process writes (across rotations) show up within
// a second, in order, each once, with the filter applied; the records before come first.
func TestFollowOtherProcess(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	appendN(t, l, 3)
	require.NoError(t, l.Close())

	got := startFollow(t, path, Filter{Event: EventExecDecision})
	time.Sleep(300 * time.Millisecond)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envWriter+"="+path, envCount+"=200", envRotate+"=8192", envFsync+"=never")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	wrote := time.Now()
	rs, err := listRotated(path)
	require.NoError(t, err)
	require.NotEmpty(t, rs, "the writer rotated the log")

	waitFor(t, 2*time.Second, func() bool { r, _ := got.snapshot(); return len(r) >= 203 }, "203 records")
	recs, at := got.snapshot()
	require.Len(t, recs, 203, "each record once")
	for i, r := range recs {
		assert.Equal(t, uint64(i+1), r.Seq, "in order")
	}
	// The last record was written before the writer exited: it arrived within a second.
	assert.Less(t, at[len(at)-1].Sub(recs[len(recs)-1].Time), time.Second)
	assert.Less(t, at[len(at)-1].Sub(wrote), time.Second)
	for _, r := range recs[3:] {
		assert.Equal(t, "sess-"+strconv.Itoa(cmd.Process.Pid), r.Session)
	}
}

// TestFollowFilterAndLatency: one record at a time, each seen within a second; records the
// filter does not match are not.
func TestFollowFilterAndLatency(t *testing.T) {
	path := testPath(t)
	got := startFollow(t, path, Filter{Decision: Deny}) // no log yet: waited for
	time.Sleep(300 * time.Millisecond)
	l := openLog(t, path, Options{})
	for i := 0; i < 3; i++ {
		allow := testRecord(i)
		require.NoError(t, l.Append(allow, false))
		deny := testRecord(i)
		deny.Decision = Deny
		require.NoError(t, l.Append(deny, false))
		start := time.Now()
		waitFor(t, time.Second, func() bool { r, _ := got.snapshot(); return len(r) == i+1 }, "deny %d within a second", i)
		t.Logf("record %d seen after %s", i, time.Since(start))
	}
	recs, _ := got.snapshot()
	for _, r := range recs {
		assert.Equal(t, Deny, r.Decision)
	}
}

// TestFollowWaitsForNewline: a record half written is not handed out until it is whole.
func TestFollowWaitsForNewline(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	appendN(t, l, 2)
	require.NoError(t, l.Close())
	lines := fileLines(t, path)
	writeLines(t, path, [][]byte{lines[0], lines[1][:40]})
	got := startFollow(t, path, Filter{})
	// The whole record first (however long a loaded machine takes to read it), then a few
	// more looks at the half one, which must not come out.
	waitFor(t, 30*time.Second, func() bool { r, _ := got.snapshot(); return len(r) >= 1 }, "the whole record")
	time.Sleep(3 * DefaultFollowInterval)
	r, _ := got.snapshot()
	require.Len(t, r, 1)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(lines[1][40:])
	require.NoError(t, err)
	require.NoError(t, f.Close())
	waitFor(t, time.Second, func() bool { r, _ := got.snapshot(); return len(r) == 2 }, "the completed record")
	r, _ = got.snapshot()
	assert.Equal(t, uint64(2), r[1].Seq)
}

func waitFor(t *testing.T, d time.Duration, ok func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+msg, args...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
