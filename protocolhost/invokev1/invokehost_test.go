// SPDX-License-Identifier: MIT

package invokev1

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/testkit/adaptertest"
)

var pluginScript = func() string {
	b, err := os.ReadFile(filepath.Join("testdata", "plugin.py"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

var noGrants = policy.Grants{Filesystem: policy.FilesystemNone}

// install installs the test plugin as "iv" with the startup mode; extra goes into [plugin].
func install(t *testing.T, f *adaptertest.Fixture, mode, extra string, grants policy.Grants) *core.Binding {
	t.Helper()
	f.Install(map[string]string{
		"plugin.toml": `[plugin]
name = "iv"
version = "0.1.0"
protocol = "invoke-v1"
` + extra + `
[[commands]]
name = "iv"
binary = "plugin.py"

[capabilities]
network = true

[[tools]]
name = "search"
description = "search things"
[[tools.parameters]]
name = "query"
type = "string"
required = true
`,
		"plugin.py": pluginScript,
		"mode":      mode,
	}, grants)
	return f.Binding("iv")
}

func host(f *adaptertest.Fixture) *tools.Host {
	return &tools.Host{Env: f.Env, Project: f.Project, Stderr: f.Stderr}
}

func start(t *testing.T, f *adaptertest.Fixture, b *core.Binding, lim Limits) *Session {
	t.Helper()
	s, fl := Start(context.Background(), Options{Host: host(f), Binding: b, Limits: lim})
	require.Nil(t, fl)
	t.Cleanup(func() { s.Close() })
	return s
}

type collector struct {
	mu     sync.Mutex
	events []Event
}

func (c *collector) sink(ev Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, ev)
	return nil
}

func (c *collector) types() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.events {
		out = append(out, e.Type)
	}
	return out
}

// outcomeRecord finds the invoke_outcome record of one request.
func outcomeRecord(t *testing.T, f *adaptertest.Fixture, id string) *audit.Record {
	t.Helper()
	for _, r := range f.Find(audit.EventInvokeOutcome) {
		if r.Details["invoke_id"] == id {
			return r
		}
	}
	t.Fatalf("no invoke_outcome record for %s", id)
	return nil
}

func TestStartupAndRequest(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "ok", "", noGrants), Limits{})
	assert.Contains(t, f.Stderr.String(), "plugin iv: loading plugin", "info lines are shown")
	assert.Contains(t, f.Stderr.String(), "plugin iv: plugin loaded")

	var c collector
	out := s.Invoke(context.Background(), "model", "echo", json.RawMessage(`{"q":1}`), c.sink)
	require.Nil(t, out.Failure)
	assert.Empty(t, out.PluginError)
	assert.Equal(t, []string{"info", "plugin_response", "plugin_invoke_end"}, c.types())
	assert.JSONEq(t, `{"type":"model","request":{"q":1}}`, string(c.events[1].Response))
	assert.Equal(t, 1, out.Chunks)

	infos := f.Find(audit.EventPluginInfo)
	require.Len(t, infos, 2)
	assert.Equal(t, "loading plugin", infos[0].Details["info"])
	reqs := f.Find(audit.EventInvokeRequest)
	require.Len(t, reqs, 1)
	assert.Equal(t, audit.Allow, reqs[0].Decision)
	assert.Equal(t, "echo", reqs[0].Details["action"])
	o := outcomeRecord(t, f, out.InvokeID)
	assert.Equal(t, audit.Allow, o.Decision)
	assert.Less(t, reqs[0].Seq, o.Seq, "decision before outcome")
	assert.Equal(t, reqs[0].Session, o.Session)
}

// Two requests in flight at once, their chunks interleaved on the wire, each gets its own.
func TestConcurrentInterleaved(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "ok", "", noGrants), Limits{})
	var wg sync.WaitGroup
	var cs [2]collector
	var outs [2]*Outcome
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = s.Invoke(context.Background(), "tool", "interleave", nil, cs[i].sink)
		}()
	}
	wg.Wait()
	for i := range 2 {
		require.Nil(t, outs[i].Failure)
		assert.Equal(t, []string{"plugin_response", "plugin_response", "plugin_response", "plugin_invoke_end"}, cs[i].types())
		for j, ev := range cs[i].events[:3] {
			var m map[string]any
			require.NoError(t, json.Unmarshal(ev.Response, &m))
			assert.Equal(t, outs[i].InvokeID, m["req"], "chunk of its own request")
			assert.Equal(t, float64(j), m["i"], "in order")
		}
	}
	assert.NotEqual(t, outs[0].InvokeID, outs[1].InvokeID)
}

// 10,000 chunks stream through with the host's live heap bounded: nothing of the stream is
// kept beyond the per-request buffer.
func TestStreamTenThousandChunksBoundedMemory(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "ok", "", noGrants), Limits{})
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak uint64
	n, total := 0, 0
	out := s.Invoke(context.Background(), "tool", "stream", json.RawMessage(`{"n":10000,"size":2000}`), func(ev Event) error {
		if ev.Type != TypeResponse {
			return nil
		}
		n++
		total += len(ev.Response)
		if n%2000 == 0 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
		return nil
	})
	require.Nil(t, out.Failure)
	assert.Equal(t, 10000, n)
	assert.Equal(t, 10000, out.Chunks)
	assert.Greater(t, total, 20_000_000, "the stream is 20 MB")
	grown := int64(peak) - int64(base.HeapAlloc)
	assert.Less(t, grown, int64(4<<20), "live heap grew by %d bytes while 20 MB streamed", grown)
	assert.Equal(t, DefaultStreamBuffer, s.lim.StreamBuffer, "at most this many messages wait for the consumer")
}

func TestRequestFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		action   string
		extra    string
		lim      Limits
		code     reason.Code // "" = the plugin's own failure
		msg      string
		exit     int
		plugErr  string
		thenLive bool // the session still serves requests afterwards
	}{
		{"plugin error", "fail", "", Limits{}, "", "", 1, "no such model", true},
		{"timeout", "sleep", `timeout = "1s"`, Limits{}, reason.Timeout, TimeoutMessage, 124, "", true},
		{"timeout from the plugin", "timeout_prefix", "", Limits{}, reason.Timeout, TimeoutMessage, 124, "", true},
		{"crashed", "crash", "", Limits{}, reason.Crashed, "exited (status 5)", 108, "", false},
		{"malformed line", "garbage", "", Limits{}, reason.MalformedResponse, "not one complete JSON object", 107, "", true},
		{"unknown type", "badtype", "", Limits{}, reason.MalformedResponse, `sent type "progress"`, 107, "", true},
		{"chunks per request", "stream", "", Limits{ChunksPerRequest: 50}, reason.LimitExceeded, "more than 50 chunks", 109, "", true},
		{"bytes per request", "stream", "", Limits{BytesPerRequest: 2000}, reason.LimitExceeded, "more than 2000 bytes", 109, "", true},
		{"line length", "stream_long", "", Limits{}, reason.MalformedResponse, "longer than 4096 bytes", 107, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := adaptertest.New(t, func(c *policy.Config) { c.Limits.LineMax = 4096 })
			s := start(t, f, install(t, f, "ok", tc.extra, noGrants), tc.lim)
			action, req := tc.action, json.RawMessage(`{"n":100,"size":10}`)
			if action == "stream_long" {
				action, req = "stream", json.RawMessage(`{"n":1,"size":5000}`)
			}
			var c collector
			out := s.Invoke(context.Background(), "tool", action, req, c.sink)
			if tc.code == "" {
				require.Nil(t, out.Failure)
				assert.Equal(t, tc.plugErr, out.PluginError)
			} else {
				require.NotNil(t, out.Failure)
				assert.Equal(t, tc.code, out.Failure.Code, out.Failure.Msg)
				assert.Contains(t, out.Failure.Msg, tc.msg)
				assert.Equal(t, tc.exit, reason.ExitStatus(out.Failure.Code))
			}
			exit := reason.ToolFailed
			if out.Failure != nil {
				exit = reason.ExitStatus(out.Failure.Code)
			}
			assert.Equal(t, tc.exit, exit)
			o := outcomeRecord(t, f, out.InvokeID)
			assert.Equal(t, audit.Error, o.Decision)
			wantCode := tc.code
			if wantCode == "" {
				wantCode = reason.ToolError // the plugin's own error: never "ok"
			}
			assert.Equal(t, string(wantCode), o.Reason)
			var c2 collector
			next := s.Invoke(context.Background(), "tool", "echo", nil, c2.sink)
			if tc.thenLive {
				assert.Nil(t, next.Failure, "the session serves the next request")
			} else {
				require.NotNil(t, next.Failure)
				assert.Equal(t, reason.Crashed, next.Failure.Code)
			}
		})
	}
}

// An error without invoke_id after ready fails every open request.
func TestGlobalErrorFailsEveryOpenRequest(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "ok", "", noGrants), Limits{})
	var wg sync.WaitGroup
	var outs [2]*Outcome
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = s.Invoke(context.Background(), "tool", "sleep", nil, func(Event) error { return nil })
		}()
	}
	for s.openCount() < 2 {
		runtime.Gosched()
	}
	out := s.Invoke(context.Background(), "tool", "global_error", nil, func(Event) error { return nil })
	wg.Wait()
	for _, o := range append(outs[:], out) {
		require.NotNil(t, o.Failure)
		assert.Equal(t, reason.Crashed, o.Failure.Code)
		assert.Equal(t, 108, reason.ExitStatus(o.Failure.Code))
		assert.Contains(t, o.Failure.Msg, "plugin runtime failed: heartbeat lost")
		assert.Equal(t, string(reason.Crashed), outcomeRecord(t, f, o.InvokeID).Reason)
	}
}

func TestRequestsInFlightBound(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "ok", "", noGrants), Limits{InFlight: 1})
	done := make(chan *Outcome)
	go func() {
		done <- s.Invoke(context.Background(), "tool", "sleep", nil, func(Event) error { return nil })
	}()
	for s.openCount() < 1 {
		runtime.Gosched()
	}
	out := s.Invoke(context.Background(), "tool", "echo", nil, func(Event) error { return nil })
	require.NotNil(t, out.Failure)
	assert.Equal(t, reason.LimitExceeded, out.Failure.Code)
	assert.Equal(t, 109, reason.ExitStatus(out.Failure.Code))
	var denied bool
	for _, r := range f.Find(audit.EventInvokeRequest) {
		if r.Decision == audit.Deny && r.Reason == string(reason.LimitExceeded) {
			denied = true
			assert.Equal(t, "requests_in_flight", r.Details["limit"])
		}
	}
	assert.True(t, denied, "the refused request is on record")
	s.Close()
	assert.Equal(t, reason.Cancelled, (<-done).Failure.Code)
}

func TestStartupFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode string
		kind string
	}{
		{"file error", "start_error:read plugin file error: no such file", "plugin file error"},
		{"decode error", "start_error:decode plugin file error: not a zip", "plugin file error"},
		{"manifest error", "start_error:get declaration error: manifest.yaml missing", "manifest error"},
		{"environment error", "start_error:initialize python environment error: no python", "environment error"},
		{"runtime error", "start_error:plugin runtime failed: heartbeat timeout", "runtime error"},
		{"other error", "start_error:something else", "startup error"},
		{"not ready in time", "no_ready", "was not ready within 1s"},
		{"malformed line", "start_garbage", "malformed line while starting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := adaptertest.New(t, func(c *policy.Config) { c.Limits.StartupTimeout = time.Second })
			b := install(t, f, tc.mode, "", noGrants)
			s, fl := Start(context.Background(), Options{Host: host(f), Binding: b})
			require.Nil(t, s)
			require.NotNil(t, fl)
			assert.Equal(t, reason.LaunchFailed, fl.Code)
			assert.Equal(t, 126, reason.ExitStatus(fl.Code))
			assert.Contains(t, fl.Msg, tc.kind)
			if msg, ok := strings.CutPrefix(tc.mode, "start_error:"); ok {
				assert.Contains(t, fl.Msg, msg, "the plugin's message is carried")
			}
			var rec *audit.Record
			for _, r := range f.Find(audit.EventPluginStart) {
				if r.Decision == audit.Error {
					rec = r
				}
			}
			require.NotNil(t, rec, "the failed start is on record")
			assert.Equal(t, string(reason.LaunchFailed), rec.Reason)
			assert.Contains(t, rec.Details["message"], tc.kind)
			assert.Len(t, f.Find(audit.EventPluginExit), 1, "and the plugin is gone")
		})
	}
}

// tools call plugin_iv_search is type tool, action invoke_tool, {tool_name, tool_parameters}.
func TestToolsCatalogue(t *testing.T) {
	f := adaptertest.New(t, nil)
	install(t, f, "ok", "", noGrants)
	c := f.Catalogue()
	ts := c.List(context.Background())
	require.Len(t, ts, 1)
	assert.Equal(t, "plugin_iv_search", ts[0].Name)
	assert.Equal(t, "invoke-v1", ts[0].Protocol)
	_, res, err := c.Call(context.Background(), "plugin_iv_search", map[string]any{"query": "owls"})
	require.NoError(t, err)
	require.True(t, res.Success, res.Message)
	assert.JSONEq(t, `{"tool":"search","params":{"query":"owls"}}`, string(res.Output))
	reqs := f.Find(audit.EventInvokeRequest)
	require.Len(t, reqs, 1)
	assert.Equal(t, "tool", reqs[0].Details["type"])
	assert.Equal(t, "invoke_tool", reqs[0].Details["action"])
	_, _, err = c.Call(context.Background(), "plugin_iv_search", map[string]any{})
	assert.ErrorIs(t, err, tools.ErrBadArguments)
}

func hostListener(t *testing.T) (int, chan struct{}) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	got := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			got <- struct{}{}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, got
}

// A TCP plugin: announced on loopback, fledge connects, requests go over the socket; the
// plugin may bind its one port and nothing else, and connects nowhere.
func TestTCPPlugin(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "tcp", `transport = "tcp"`, noGrants), Limits{})
	require.NotNil(t, s.conn, "connected over TCP")
	var c collector
	out := s.Invoke(context.Background(), "tool", "echo", json.RawMessage(`{"over":"tcp"}`), c.sink)
	require.Nil(t, out.Failure)
	assert.JSONEq(t, `{"type":"tool","request":{"over":"tcp"}}`, string(c.events[1].Response))
	starts := f.Find(audit.EventPluginStart)
	require.Len(t, starts, 1)
	prof := starts[0].Details["profile"].(map[string]any)
	assert.Equal(t, "none", prof["network"])
	require.Len(t, prof["listen_tcp"], 1)
	assert.Contains(t, f.Stderr.String(), "plugin is running on 127.0.0.1:")

	// While serving, it tries to connect out to a listener on the host (refused: the
	// listener sees nothing) and to bind another port (allowed: in its own network namespace
	// no port is reachable from outside; TestTCPWithoutNetworkNamespace holds it to one port
	// where there is no namespace).
	port, got := hostListener(t)
	var c2 collector
	out = s.Invoke(context.Background(), "tool", "connect_out", json.RawMessage(fmt.Sprintf(`{"port":%d}`, port)), c2.sink)
	require.Nil(t, out.Failure)
	var res map[string]string
	require.NoError(t, json.Unmarshal(c2.events[1].Response, &res))
	assert.NotEqual(t, "ok", res["connect"], "a TCP plugin without network connects nowhere")
	assert.Equal(t, "ok", res["bind_other"], "any port in its own network namespace")
	assert.Equal(t, true, prof["listen_any_tcp"])
	select {
	case <-got:
		t.Fatal("the host listener got a connection from the plugin")
	default:
	}
}

// tcpRefusedCase is one refused TCP plugin; platformTCPRefusedCases adds this platform's.
type tcpRefusedCase struct {
	name, mode, msg string
	fixture         func(t *testing.T) *adaptertest.Fixture
}

func TestTCPPluginRefused(t *testing.T) {
	for _, tc := range append([]tcpRefusedCase{
		{"tcp_nonloopback", "tcp_nonloopback", `announced host "10.11.12.13": refused, a TCP plugin must listen on loopback`, nil},
		// In its own network namespace any port is the plugin's to announce; one nobody
		// listens on is simply not there.
		{"tcp_wrong_port", "tcp_wrong_port", "connection refused", nil},
	}, platformTCPRefusedCases...) {
		t.Run(tc.name, func(t *testing.T) {
			f := adaptertest.New(t, nil)
			if tc.fixture != nil {
				f = tc.fixture(t)
			}
			b := install(t, f, tc.mode, `transport = "tcp"`, noGrants)
			s, fl := Start(context.Background(), Options{Host: host(f), Binding: b})
			require.Nil(t, s)
			require.NotNil(t, fl)
			assert.Equal(t, reason.LaunchFailed, fl.Code)
			assert.Equal(t, 126, reason.ExitStatus(fl.Code))
			assert.Contains(t, fl.Msg, tc.msg)
			var found bool
			for _, r := range f.Find(audit.EventPluginStart) {
				if r.Decision == audit.Error && strings.Contains(fmt.Sprint(r.Details["message"]), tc.msg) {
					found = true
				}
			}
			assert.True(t, found, "the refusal is on record")
		})
	}
}

// The caller's --timeout (tools.WithCallTimeout) bounds a request.
func TestCallerTimeout(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "ok", "", noGrants), Limits{})
	ctx := tools.WithCallTimeout(context.Background(), time.Second)
	out := s.Invoke(ctx, "tool", "sleep", nil, func(Event) error { return nil })
	require.NotNil(t, out.Failure)
	assert.Equal(t, reason.Timeout, out.Failure.Code)
	assert.Contains(t, out.Failure.Msg, TimeoutMessage+" (request "+out.InvokeID+", 1s)")
}

// type and action are both required: a request with either empty (or blank) is refused on
// record and never reaches the plugin; the session serves the next request.
func TestEmptyTypeOrActionRefused(t *testing.T) {
	f := adaptertest.New(t, nil)
	s := start(t, f, install(t, f, "ok", "", noGrants), Limits{})
	for _, tc := range []struct{ typ, action, msg string }{
		{"", "echo", "access type"},
		{"tool", "", "action"},
		{"  ", "echo", "access type"},
		{"tool", "\t", "action"},
	} {
		var c collector
		out := s.Invoke(context.Background(), tc.typ, tc.action, nil, c.sink)
		require.NotNil(t, out.Failure, "%q/%q", tc.typ, tc.action)
		assert.Equal(t, reason.MalformedMessage, out.Failure.Code)
		assert.Contains(t, out.Failure.Msg, tc.msg)
		assert.Empty(t, c.events, "nothing came back: nothing was sent")
	}
	reqs := f.Find(audit.EventInvokeRequest)
	require.Len(t, reqs, 4)
	for _, r := range reqs {
		assert.Equal(t, audit.Deny, r.Decision)
		assert.Equal(t, string(reason.MalformedMessage), r.Reason)
	}
	assert.Empty(t, f.Find(audit.EventInvokeOutcome), "no request went out")
	var c collector
	out := s.Invoke(context.Background(), "tool", "echo", nil, c.sink)
	assert.Nil(t, out.Failure, "the session serves the next request")
}
