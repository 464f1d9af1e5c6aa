// SPDX-License-Identifier: MIT

package report

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/testkit/headless"
)

// openBrowser starts headless Chromium, or skips (fails under FLEDGE_REQUIRE_SANDBOX=1,
// where .ci/run installs it).
func openBrowser(t *testing.T, ctx context.Context) *headless.Browser {
	t.Helper()
	bin := headless.Find()
	if bin == "" {
		if os.Getenv("FLEDGE_REQUIRE_SANDBOX") == "1" {
			t.Fatal("no chromium: .ci/run installs it")
		}
		t.Skip("no chromium installed")
	}
	b, err := headless.Start(ctx, bin, t.TempDir(), 1400, 1000)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// writeLog writes n records in sessions of perSession records each: execs with outcomes,
// connections, DNS refusals and kernel refusals, as a busy plugin's log looks.
func writeLog(t testing.TB, path string, n, perSession int) {
	l, err := audit.Open(path, audit.Options{Fsync: audit.FsyncNever, RotateBytes: -1})
	require.NoError(t, err)
	defer l.Close()
	p := &audit.PluginRef{Name: "builder", Version: "1.2.0"}
	for i := 0; i < n; i++ {
		s := fmt.Sprintf("%016x", i/perSession)
		r := &audit.Record{Session: s, Plugin: p, Decision: audit.Allow, Reason: "ok"}
		switch k := i % perSession; {
		case k == 0:
			r.Event, r.Details = audit.EventPluginStart, map[string]any{"command": "build", "argv": []string{"build", "--all"}}
		case k == perSession-1:
			r.Event, r.Details = audit.EventPluginExit, map[string]any{"exit_code": 0, "duration_ms": 5000}
		case k%5 == 1:
			r.Event, r.Details = audit.EventExecDecision, map[string]any{"command": fmt.Sprintf("go test ./pkg/%d/...", k), "cwd_resolved": "/home/u/proj"}
		case k%5 == 2:
			r.Event, r.Details = audit.EventExecOutcome, map[string]any{"exit_code": 0, "duration_ms": 120 + k, "stdout_bytes": 812}
		case k%5 == 3:
			r.Event, r.Details = audit.EventNetConnect, map[string]any{"host": "proxy.golang.org", "port": 443, "address": "142.250.1.1", "why": "granted"}
		case k%10 == 4:
			r.Event, r.Decision, r.Reason = audit.EventNetDNS, audit.Deny, "capability_not_granted"
			r.Details = map[string]any{"host": fmt.Sprintf("t%d.telemetry.example", k%7), "qtype": "A", "why": "not_granted"}
		default:
			r.Event, r.Decision, r.Reason = audit.EventKernelDenied, audit.Deny, "path_escape"
			r.Details = map[string]any{"kind": "path", "path": "/home/u/.ssh/id_ed25519", "access": "read", "syscall": "openat"}
		}
		require.NoError(t, l.Append(r, false))
	}
}

// A report of 100,000 records: its size, the time to make it, and the time headless
// Chromium takes from navigation to the page drawn (the page sets data-ready when it is).
func TestReportLargeLogRendersInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("large log")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := openBrowser(t, ctx)
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.jsonl")
	writeLog(t, log, 100_000, 100)
	fi, err := os.Stat(log)
	require.NoError(t, err)
	out := filepath.Join(dir, "report.html")
	f, err := os.Create(out)
	require.NoError(t, err)
	start := time.Now()
	st, err := Write(f, Options{Path: log, Version: "test"})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	made := time.Since(start)
	require.Equal(t, 100_000, st.Records)
	require.Equal(t, 1000, st.Sessions)
	rfi, err := os.Stat(out)
	require.NoError(t, err)

	start = time.Now()
	url := "file://" + out
	require.NoError(t, b.Navigate(ctx, url))
	require.NoError(t, b.WaitFor(ctx, `document.body.dataset.ready === "1"`))
	wall := time.Since(start)
	var pageMS string
	require.NoError(t, b.Eval(ctx, `document.body.dataset.renderMs`, &pageMS))
	var rows int
	require.NoError(t, b.Eval(ctx, `document.querySelectorAll("#sessions tr.sess").length`, &rows))
	require.Equal(t, 500, rows, "the first page of sessions")
	require.Empty(t, b.Problems(url))
	t.Logf("log %d bytes (%d records); report %d bytes, made in %v; Chromium: drawn %s ms after navigation start, %v wall",
		fi.Size(), st.Records, rfi.Size(), made.Round(time.Millisecond), pageMS, wall.Round(time.Millisecond))
	require.Less(t, wall, 10*time.Second, "a 100,000-record report draws in a few seconds")
	require.Less(t, rfi.Size(), fi.Size()/3, "the report is much smaller than the log")
	if os.Getenv("FLEDGE_REPORT_SCREENSHOT") != "" {
		png, err := b.Screenshot(ctx, 1400, 2400)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(os.Getenv("FLEDGE_REPORT_SCREENSHOT"), png, 0o644))
	}
}

// The data block holds base64 only: no byte of a record can end the element.
func TestReportDataBlockIsBase64(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.jsonl")
	l, err := audit.Open(log, audit.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Append(&audit.Record{Session: "s1", Event: audit.EventExecDecision, Decision: audit.Allow, Reason: "ok",
		Plugin: &audit.PluginRef{Name: "</script><script>x=1</script>"}, Details: map[string]any{"command": "</script><!--<script>"}}, true))
	require.NoError(t, l.Close())
	var buf bytes.Buffer
	_, err = Write(&buf, Options{Path: log})
	require.NoError(t, err)
	page := buf.String()
	i := bytes.Index(buf.Bytes(), []byte(`id="`+DataElementID+`">`))
	require.Positive(t, i)
	rest := page[i+len(`id="`+DataElementID+`">`):]
	end := bytes.Index([]byte(rest), []byte("</script>"))
	for _, c := range rest[:end] {
		require.Contains(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", string(c))
	}
	require.NotContains(t, page, "x=1")
	require.Equal(t, 2, bytes.Count(buf.Bytes(), []byte("<script")), "the data block and the page's own script")
}
