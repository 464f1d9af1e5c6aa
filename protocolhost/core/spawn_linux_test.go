// SPDX-License-Identifier: MIT

package core

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type memLog struct{ recs []*audit.Record }

func (m *memLog) Append(r *audit.Record, _ bool) error { m.recs = append(m.recs, r); return nil }

func (m *memLog) events() []string {
	var out []string
	for _, r := range m.recs {
		out = append(out, r.Event+"/"+string(r.Decision)+"/"+r.Reason)
	}
	return out
}

func newSandbox(t *testing.T) sandbox.Sandbox {
	sb, err := platform.New(platform.Options{})
	require.NoError(t, err)
	if c, ok := sb.(io.Closer); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	return sb
}

func shSpec(t *testing.T, script string) sandbox.Spec {
	dir := t.TempDir()
	return sandbox.Spec{
		Kind: sandbox.KindPlugin, Name: "core-test", Path: "/bin/sh", Args: []string{"sh", "-c", script},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Access: sandbox.Access{ReadExec: policy.SystemPaths, ReadWrite: []string{dir}, ReadOnly: []string{"/etc"}},
		Limits: sandbox.Limits{Pids: 32, MemoryBytes: 256 << 20},
	}
}

// The ladder: a plugin that ignores SIGTERM is SIGKILLed after KillAfter; plugin_start is on
// record before it ran, plugin_exit after, with the cause; its stderr was forwarded.
func TestSpawnStopLadder(t *testing.T) {
	log := &memLog{}
	rec := NewRecorder(log, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)
	var stderr bytes.Buffer
	p, err := Spawn(SpawnOptions{
		Sandbox: newSandbox(t), Spec: shSpec(t, `trap "" TERM; echo started >&2; read line; echo "got $line" >&2; sleep 60`),
		Cwd: "/", Pipes: true, Stderr: &stderr, Recorder: rec,
		Ladder: Ladder{CancelGrace: 100 * time.Millisecond, KillAfter: 400 * time.Millisecond},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"plugin_start/allow/ok"}, log.events(), "on record before it runs")
	_, err = p.Stdin.Write([]byte("cancel\n"))
	require.NoError(t, err)
	notified := make(chan struct{})
	p.Stop("timeout", false, func() { close(notified) })
	<-notified
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the ladder did not end a plugin ignoring SIGTERM")
	}
	ex := p.Finish(map[string]any{"extra": 1})
	assert.Equal(t, "SIGKILL", ex.Result.Signal)
	assert.Equal(t, "timeout", ex.StoppedBy)
	assert.False(t, ex.Interrupted)
	assert.Contains(t, stderr.String(), "started")
	assert.Equal(t, []string{"plugin_start/allow/ok", "plugin_exit/allow/timeout"}, log.events())
	last := log.recs[len(log.recs)-1]
	assert.Equal(t, "timeout", last.Details["stopped_by"])
	assert.Equal(t, 1, last.Details["extra"])
}

// A user interrupt ends with 130 whatever the plugin's own status.
func TestSpawnUserInterrupt(t *testing.T) {
	log := &memLog{}
	p, err := Spawn(SpawnOptions{
		Sandbox: newSandbox(t), Spec: shSpec(t, `read line; exit 0`), Cwd: "/", Pipes: true,
		Recorder: NewRecorder(log, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil),
	})
	require.NoError(t, err)
	p.Stop("interrupt", true, func() { _, _ = p.Stdin.Write([]byte("bye\n")) })
	ex := p.Finish(nil)
	assert.Equal(t, 130, ex.Code)
	assert.True(t, ex.Interrupted)
	assert.Equal(t, "plugin_exit/allow/cancelled", log.events()[len(log.events())-1])
}

// A profile reaching a denied path (fledge's state) is refused before anything runs or is
// recorded as started, on every backend.
func TestSpawnRefusesDeniedPath(t *testing.T) {
	log := &memLog{}
	spec := shSpec(t, "true")
	state := t.TempDir()
	spec.Access.Deny = []string{filepath.Join(state, "fledge")}
	spec.Access.ReadOnly = append(spec.Access.ReadOnly, state)
	_, err := Spawn(SpawnOptions{Sandbox: newSandbox(t), Spec: spec, Cwd: "/",
		Recorder: NewRecorder(log, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrLaunch))
	assert.True(t, errors.Is(err, sandbox.ErrInvalidSpec))
	assert.Empty(t, log.events())
}

// No record, no plugin: an audit log that cannot take plugin_start stops the start.
func TestSpawnAuditFailure(t *testing.T) {
	rec := NewRecorder(failLog{}, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	spec := shSpec(t, "touch "+marker)
	spec.Access.ReadWrite = append(spec.Access.ReadWrite, filepath.Dir(marker))
	_, err := Spawn(SpawnOptions{Sandbox: newSandbox(t), Spec: spec, Cwd: "/", Recorder: rec})
	require.ErrorIs(t, err, ErrAudit)
	assert.NoFileExists(t, marker)
}

type failLog struct{}

func (failLog) Append(*audit.Record, bool) error { return errors.New("disk full") }

// blockingLog holds every append until release is closed.
type blockingLog struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	recs    []*audit.Record
}

func (b *blockingLog) Append(r *audit.Record, _ bool) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	b.mu.Lock()
	b.recs = append(b.recs, r)
	b.mu.Unlock()
	return nil
}

// The plugin_start record is written while the sandbox prepares the start, but the plugin
// never runs before it is on record: an audit log that takes its time holds the plugin
// (its first act, a file, does not appear) until the record is written.
func TestSpawnWaitsForStartRecord(t *testing.T) {
	log := &blockingLog{entered: make(chan struct{}, 1), release: make(chan struct{})}
	rec := NewRecorder(log, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	spec := shSpec(t, "touch "+marker+"; read line")
	spec.Access.ReadWrite = append(spec.Access.ReadWrite, filepath.Dir(marker))
	type spawned struct {
		p   *Proc
		err error
	}
	done := make(chan spawned, 1)
	go func() {
		p, err := Spawn(SpawnOptions{Sandbox: newSandbox(t), Spec: spec, Cwd: "/", Pipes: true, Recorder: rec})
		done <- spawned{p, err}
	}()
	select {
	case <-log.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("plugin_start was never appended")
	}
	// Time for the sandbox to prepare and reach the point where it would start the plugin.
	time.Sleep(500 * time.Millisecond)
	assert.NoFileExists(t, marker, "the plugin ran before its plugin_start record was written")
	select {
	case s := <-done:
		t.Fatalf("Spawn returned before the record was written: %v", s.err)
	default:
	}
	close(log.release)
	s := <-done
	require.NoError(t, s.err)
	require.Eventually(t, func() bool { _, err := os.Stat(marker); return err == nil }, 30*time.Second, 5*time.Millisecond, "the plugin ran once on record")
	_, _ = s.p.Stdin.Write([]byte("bye\n"))
	ex := s.p.Finish(nil)
	assert.Equal(t, 0, ex.Code)
	log.mu.Lock()
	defer log.mu.Unlock()
	require.NotEmpty(t, log.recs)
	assert.Equal(t, audit.EventPluginStart, log.recs[0].Event)
}

// syncFailLog takes every record but cannot make it durable (its fsync fails, as a full or
// failing disk reports at the flush), and keeps what was appended.
type syncFailLog struct {
	mu   sync.Mutex
	recs []*audit.Record
}

func (l *syncFailLog) Append(r *audit.Record, _ bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}

func (l *syncFailLog) AppendBudget(r *audit.Record, durable bool, _ audit.Budget) error {
	return l.Append(r, durable)
}

func (l *syncFailLog) AppendDeferredSyncBudget(r *audit.Record, _ audit.Budget) (func() error, error) {
	_ = l.Append(r, false)
	return func() error { return errors.New("fsync: input/output error") }, nil
}

// A plugin_start record that is written but cannot be made durable refuses the start as an
// audit failure, like one that cannot be written: the plugin never runs, and no plugin_exit
// stands for a start the log never held.
func TestSpawnAuditSyncFailure(t *testing.T) {
	log := &syncFailLog{}
	rec := NewRecorder(log, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	spec := shSpec(t, "touch "+marker)
	spec.Access.ReadWrite = append(spec.Access.ReadWrite, filepath.Dir(marker))
	_, err := Spawn(SpawnOptions{Sandbox: newSandbox(t), Spec: spec, Cwd: "/", Recorder: rec})
	require.ErrorIs(t, err, ErrAudit)
	time.Sleep(200 * time.Millisecond)
	assert.NoFileExists(t, marker)
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, r := range log.recs {
		assert.NotEqual(t, audit.EventPluginExit, r.Event, "a plugin_exit for a start that was never durable")
	}
}
