// SPDX-License-Identifier: MIT

package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocol"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func TestInit(t *testing.T) {
	_, p := session(t)
	want := testInit()
	want.Type = protocol.TypeInit
	assert.Equal(t, &want, p.Init())
	assert.Equal(t, "deploy", p.Command())
	assert.Equal(t, []string{"staging", "--dry-run"}, p.Args())
}

func TestInitSkipsNoiseFirst(t *testing.T) {
	h, r, w := pipes(t)
	var warn bytes.Buffer
	go func() {
		_, _ = io.WriteString(h.toPlugin, "garbage\n{\"type\":\"future\"}\n")
		h.send(protocol.NewResponse(protocol.StringID("1"), "stray"))
		h.send(testInit())
	}()
	p, err := NewIO(r, w, WithWarnings(&warn))
	require.NoError(t, err)
	assert.Equal(t, "deploy", p.Command())
	assert.Contains(t, warn.String(), "line 1: skipped: malformed JSON")
	assert.Contains(t, warn.String(), `unknown message type "future"`)
}

func TestInitFailures(t *testing.T) {
	t.Run("eof", func(t *testing.T) {
		_, err := NewIO(strings.NewReader(`{"type":"output","text":"x"}`+"\n"), io.Discard)
		require.ErrorIs(t, err, ErrNoInit)
	})
	t.Run("cancel before init", func(t *testing.T) {
		_, err := NewIO(strings.NewReader(`{"type":"cancel","reason":"user_interrupt"}`+"\n"), io.Discard)
		var ce *CancelError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "user_interrupt", ce.Reason)
		assert.ErrorIs(t, err, ErrCancelled)
	})
	t.Run("context ends first", func(t *testing.T) {
		r, w := io.Pipe()
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_, err := Connect(ctx, r, io.Discard)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestFireAndForget(t *testing.T) {
	h, p := session(t)
	require.NoError(t, p.Output("Deployed\n"))
	require.NoError(t, p.Log(LevelWarn, "careful"))
	require.NoError(t, p.Progress("Uploading", 3, 10))
	require.NoError(t, p.Spinner("Thinking"))
	require.NoError(t, p.ProgressDone())
	require.NoError(t, p.Store("last", "production"))

	three, ten := 3.0, 10.0
	want := []*protocol.Message{
		{Type: protocol.TypeOutput, Output: &protocol.Output{Text: "Deployed\n"}},
		{Type: protocol.TypeLog, Log: &protocol.Log{Level: "warn", Message: "careful"}},
		{Type: protocol.TypeProgress, Progress: &protocol.Progress{Message: "Uploading", Current: &three, Total: &ten}},
		{Type: protocol.TypeProgress, Progress: &protocol.Progress{Message: "Thinking"}},
		{Type: protocol.TypeProgress, Progress: &protocol.Progress{Done: true}},
		{Type: protocol.TypeStore, Store: &protocol.Store{Key: "last", Value: "production"}},
	}
	for i, w := range want {
		got := h.recv()
		w.Line = i + 1
		assert.Equal(t, w, got)
	}
}

func TestBlockingCalls(t *testing.T) {
	h, p := session(t)
	var mu sync.Mutex
	var seen []*protocol.Message
	h.serve(func(m *protocol.Message) any {
		mu.Lock()
		seen = append(seen, m)
		mu.Unlock()
		id := m.RequestID()
		switch {
		case m.Prompt != nil:
			return protocol.NewResponse(id, "production")
		case m.Confirm != nil:
			return protocol.NewResponse(id, true)
		case m.Select != nil:
			return protocol.NewResponse(id, "staging")
		case m.MultiSelect != nil:
			return protocol.NewResponse(id, []string{"c", "a"})
		case m.Load != nil && m.Load.Key == "missing":
			return protocol.NewResponse(id, nil)
		case m.Load != nil:
			return protocol.NewResponse(id, "stored")
		case m.Exec != nil:
			return protocol.NewResponse(id, protocol.ExecResult{Code: 3, Stdout: "out", Stderr: "err"})
		case m.Metadata != nil:
			return protocol.NewResponse(id, map[string]any{"git_tags": []string{"v1"}, "nope": nil})
		}
		return nil
	})
	ctx := ctxT(t)

	s, err := p.Prompt(ctx, "Target:", PromptDefault("staging"), PromptValidate(ValidateNonEmpty))
	require.NoError(t, err)
	assert.Equal(t, "production", s)

	b, err := p.Confirm(ctx, "Sure?", ConfirmDefault(false))
	require.NoError(t, err)
	assert.True(t, b)

	i, choice, err := p.Select(ctx, "Env:", []string{"dev", "staging", "prod"}, SelectDefault(0))
	require.NoError(t, err)
	assert.Equal(t, 1, i)
	assert.Equal(t, "staging", choice)

	idx, chosen, err := p.MultiSelect(ctx, "Regions:", []string{"a", "b", "c"}, MultiSelectDefaults(0, 2))
	require.NoError(t, err)
	assert.Equal(t, []int{2, 0}, idx)
	assert.Equal(t, []string{"c", "a"}, chosen)

	v, ok, err := p.Load(ctx, "k")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "stored", v)
	v, ok, err = p.Load(ctx, "missing")
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Empty(t, v)

	res, err := p.Exec(ctx, "make test", ExecCwd("sub"), ExecTimeout(1500*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, &protocol.ExecResult{Code: 3, Stdout: "out", Stderr: "err"}, res)

	md, err := p.Metadata(ctx, "git_tags", "nope")
	require.NoError(t, err)
	assert.JSONEq(t, `["v1"]`, string(md["git_tags"]))
	assert.Equal(t, "null", string(md["nope"]))

	// What went over the wire: every field the options set, with distinct string ids.
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 8)
	def, val := "staging", ValidateNonEmpty
	assert.Equal(t, &protocol.Prompt{ID: seen[0].RequestID(), Message: "Target:", Default: &def, Validate: val}, seen[0].Prompt)
	f, zero := false, 0
	assert.Equal(t, &protocol.Confirm{ID: seen[1].RequestID(), Message: "Sure?", Default: &f}, seen[1].Confirm)
	assert.Equal(t, &protocol.Select{ID: seen[2].RequestID(), Message: "Env:", Options: []string{"dev", "staging", "prod"}, Default: &zero}, seen[2].Select)
	assert.Equal(t, []int{0, 2}, seen[3].MultiSelect.Defaults)
	timeout := 1.5
	assert.Equal(t, &protocol.Exec{ID: seen[6].RequestID(), Command: "make test", Cwd: "sub", Timeout: &timeout}, seen[6].Exec)
	assert.Equal(t, []string{"git_tags", "nope"}, seen[7].Metadata.Keys)
	ids := map[string]bool{}
	for _, m := range seen {
		id := string(m.RequestID())
		assert.True(t, strings.HasPrefix(id, `"`), "ids are JSON strings as the spec says: %s", id)
		assert.False(t, ids[id], "id %s reused", id)
		ids[id] = true
	}
}

func TestBadResponses(t *testing.T) {
	h, p := session(t)
	h.serve(func(m *protocol.Message) any {
		id := m.RequestID()
		switch {
		case m.Prompt != nil:
			return protocol.NewResponse(id, 42)
		case m.Confirm != nil:
			return protocol.NewResponse(id, nil)
		case m.Select != nil:
			return protocol.NewResponse(id, "not an option")
		case m.MultiSelect != nil:
			return protocol.NewResponse(id, []any{"a", 7})
		case m.Exec != nil:
			return protocol.NewResponse(id, "oops")
		case m.Load != nil:
			return protocol.NewResponse(id, []int{1})
		}
		return nil
	})
	ctx := ctxT(t)
	_, err := p.Prompt(ctx, "m")
	assert.ErrorIs(t, err, ErrBadResponse)
	_, err = p.Confirm(ctx, "m")
	assert.ErrorIs(t, err, ErrBadResponse)
	_, _, err = p.Select(ctx, "m", []string{"a"})
	assert.ErrorIs(t, err, ErrBadResponse)
	_, _, err = p.MultiSelect(ctx, "m", []string{"a"})
	assert.ErrorIs(t, err, ErrBadResponse)
	_, err = p.Exec(ctx, "true")
	assert.ErrorIs(t, err, ErrBadResponse)
	_, _, err = p.Load(ctx, "k")
	assert.ErrorIs(t, err, ErrBadResponse)
}

func TestSelectByIndexAndDuplicates(t *testing.T) {
	h, p := session(t)
	h.serve(func(m *protocol.Message) any {
		if m.Select != nil {
			return protocol.NewResponse(m.RequestID(), 2) // an index: accepted too
		}
		return protocol.NewResponse(m.RequestID(), []string{"x", "x"})
	})
	i, s, err := p.Select(ctxT(t), "m", []string{"a", "b", "c"})
	require.NoError(t, err)
	assert.Equal(t, 2, i)
	assert.Equal(t, "c", s)
	idx, _, err := p.MultiSelect(ctxT(t), "m", []string{"x", "y", "x"})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2}, idx, "a repeated option text maps to its next occurrence")
}

// TestConcurrentCalls: many goroutines, answers in reverse order of arrival, every reply
// reaches its own caller.
func TestConcurrentCalls(t *testing.T) {
	h, p := session(t)
	const goroutines, each = 16, 25
	go func() {
		for {
			// Collect up to 8 messages (fewer once the callers go quiet), then answer the
			// batch last-first.
			var batch []*protocol.Message
			m, ok := <-h.msgs
			if !ok {
				return
			}
			batch = append(batch, m)
		collect:
			for len(batch) < 8 {
				select {
				case m, ok := <-h.msgs:
					if !ok {
						break collect
					}
					batch = append(batch, m)
				case <-time.After(5 * time.Millisecond):
					break collect
				}
			}
			for i := len(batch) - 1; i >= 0; i-- {
				m := batch[i]
				switch {
				case m.Exec != nil:
					h.send(protocol.NewResponse(m.RequestID(), protocol.ExecResult{Stdout: m.Exec.Command}))
				case m.Prompt != nil:
					h.send(protocol.NewResponse(m.RequestID(), "answer:"+m.Prompt.Message))
				}
			}
		}
	}()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := fmt.Sprintf("%d-%d", g, i)
				if i%2 == 0 {
					res, err := p.Exec(ctx, "echo "+key)
					if assert.NoError(t, err) {
						assert.Equal(t, "echo "+key, res.Stdout)
					}
				} else {
					s, err := p.Prompt(ctx, key)
					assert.NoError(t, err)
					assert.Equal(t, "answer:"+key, s)
				}
				assert.NoError(t, p.Log(LevelDebug, key)) // fire-and-forget interleaved
			}
		}()
	}
	wg.Wait()
}

func TestCancelOneRequest(t *testing.T) {
	h, p := session(t)
	ctx := ctxT(t)
	errs := make(chan error, 2)
	go func() { _, err := p.Prompt(ctx, "first"); errs <- err }()
	first := h.recv()
	go func() { _, err := p.Confirm(ctx, "second"); errs <- err }()
	second := h.recv()

	h.send(protocol.NewCancel(first.RequestID(), protocol.CancelTimeout))
	err := <-errs
	var ce *CancelError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, protocol.CancelTimeout, ce.Reason)
	assert.Equal(t, "1", ce.ID)
	assert.ErrorIs(t, err, ErrCancelled)
	assert.Equal(t, "sdk: request 1 cancelled by fledge: timeout", err.Error())

	// The other request and the session go on.
	h.send(protocol.NewResponse(second.RequestID(), true))
	require.NoError(t, <-errs)
	select {
	case <-p.Cancelled():
		t.Fatal("a per-request cancel must not cancel the session")
	default:
	}
	assert.Empty(t, p.CancelReason())
}

func TestCancelSession(t *testing.T) {
	h, p := session(t)
	ctx := ctxT(t)
	const n = 5
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { _, err := p.Exec(ctx, "sleep 100"); errs <- err }()
		h.recv()
	}
	h.send(protocol.NewCancel(nil, protocol.CancelUserInterrupt))
	for i := 0; i < n; i++ {
		err := <-errs
		var ce *CancelError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, protocol.CancelUserInterrupt, ce.Reason)
		assert.Empty(t, ce.ID)
	}
	select {
	case <-p.Cancelled():
	case <-time.After(waitLimit):
		t.Fatal("Cancelled() not closed")
	}
	assert.Equal(t, protocol.CancelUserInterrupt, p.CancelReason())

	// Later calls fail at once without sending anything; fire-and-forget still works so the
	// plugin can report its cleanup.
	_, err := p.Prompt(ctx, "after")
	require.ErrorIs(t, err, ErrCancelled)
	require.NoError(t, p.Output("cleaning up\n"))
	assert.Equal(t, "cleaning up\n", h.recv().Output.Text)
}

func TestContextUnblocksAndLateResponseDropped(t *testing.T) {
	h, p := session(t)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { _, err := p.Prompt(ctx, "slow"); errs <- err }()
	late := h.recv()
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)

	// The late answer arrives after the caller left: it must not reach the next call.
	h.send(protocol.NewResponse(late.RequestID(), "late"))
	go func() {
		m := h.recv()
		h.send(protocol.NewResponse(m.RequestID(), "fresh"))
	}()
	s, err := p.Prompt(ctxT(t), "next")
	require.NoError(t, err)
	assert.Equal(t, "fresh", s)

	// A context that is already done sends nothing.
	_, err = p.Prompt(ctx, "never sent")
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, p.Output("marker"))
	assert.Equal(t, "marker", h.recv().Output.Text)
}

func TestUnknownInboundIgnored(t *testing.T) {
	h, p := session(t)
	go func() {
		m := h.recv()
		_, _ = io.WriteString(h.toPlugin, `{"type":"telemetry","id":"1","value":"x"}`+"\n")
		_, _ = io.WriteString(h.toPlugin, "not json at all\n")
		h.send(testInit())                                               // a second init is ignored
		h.send(protocol.NewResponse(protocol.StringID("999"), "orphan")) // nobody asked
		h.send(protocol.NewResponse(m.RequestID(), "real"))
	}()
	s, err := p.Prompt(ctxT(t), "m")
	require.NoError(t, err)
	assert.Equal(t, "real", s)
}

func TestHostClosesConnection(t *testing.T) {
	h, p := session(t)
	errs := make(chan error, 1)
	go func() { _, err := p.Exec(ctxT(t), "true"); errs <- err }()
	h.recv()
	require.NoError(t, h.toPlugin.Close())
	require.ErrorIs(t, <-errs, ErrClosed)
	select {
	case <-p.Done():
	case <-time.After(waitLimit):
		t.Fatal("Done() not closed")
	}
	_, err := p.Metadata(ctxT(t), "env")
	require.ErrorIs(t, err, ErrClosed)
}

func TestMaxPending(t *testing.T) {
	h, p := session(t, WithMaxPending(2))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 2; i++ {
		go func() { _, _ = p.Prompt(ctx, "hold") }()
		h.recv()
	}
	_, err := p.Prompt(ctxT(t), "one too many")
	require.ErrorIs(t, err, ErrTooManyPending)
}

func TestWriteFailure(t *testing.T) {
	h, r, _ := pipes(t)
	go h.send(testInit())
	p, err := NewIO(r, failingWriter{})
	require.NoError(t, err)
	_, err = p.Prompt(ctxT(t), "m")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk on fire")
	require.Error(t, p.Output("x"))
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestResponseValueKeptRaw(t *testing.T) {
	// Metadata values arrive untouched, whatever their shape.
	h, p := session(t)
	h.serve(func(m *protocol.Message) any {
		return protocol.NewResponse(m.RequestID(), json.RawMessage(`{"fledge_config":{"a":[1,{"b":null}]}}`))
	})
	md, err := p.Metadata(ctxT(t), "fledge_config")
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":[1,{"b":null}]}`, string(md["fledge_config"]))
}

func TestLargeExecResultReachesCaller(t *testing.T) {
	// fledge may send up to 2 x 10 MiB of output in one line: the SDK's default bound must
	// take it, or the caller would wait forever for a reply it skipped.
	h, p := session(t)
	big := strings.Repeat("0123456789abcdef", (3<<20)/16)
	h.serve(func(m *protocol.Message) any {
		return protocol.NewResponse(m.RequestID(), protocol.ExecResult{Stdout: big, Stderr: big})
	})
	res, err := p.Exec(ctxT(t), "cat big")
	require.NoError(t, err)
	assert.Equal(t, len(big), len(res.Stdout))
	assert.Equal(t, len(big), len(res.Stderr))
}
