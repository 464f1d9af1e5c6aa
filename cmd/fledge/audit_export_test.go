// SPDX-License-Identifier: MIT

package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/testkit/collectortest"
)

// exportEnv is a throwaway HOME whose fledge exports its audit log to a collector.
type exportEnv struct {
	t      *testing.T
	fledge string
	home   string
	cfg    string
	log    string
	env    []string
	n      int
}

func newExportEnv(t *testing.T) *exportEnv {
	root := t.TempDir()
	e := &exportEnv{t: t, fledge: fledgeBinary(t), home: filepath.Join(root, "home")}
	e.cfg = filepath.Join(e.home, ".config", "fledge")
	e.log = filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl")
	require.NoError(t, os.MkdirAll(e.cfg, 0o700))
	e.env = []string{"HOME=" + e.home, "FLEDGE_CONFIG_DIR=" + e.cfg, "FLEDGE_AUDIT_LOG=" + e.log,
		"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "NO_COLOR=1"}
	return e
}

func (e *exportEnv) config(s string) {
	require.NoError(e.t, os.WriteFile(filepath.Join(e.cfg, "config.toml"), []byte(s), 0o600))
}

// run runs the real CLI as its own process (so its exit is a real exit) and returns its
// output and how long it took.
func (e *exportEnv) run(stdin string, extraEnv []string, args ...string) (string, time.Duration, error) {
	cmd := exec.Command(e.fledge, args...)
	cmd.Env = append(append([]string{}, e.env...), extraEnv...)
	cmd.Stdin = strings.NewReader(stdin)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(start), err
}

// install installs a fresh small plugin: a short-lived fledge process that writes records.
func (e *exportEnv) install(extraEnv ...string) (string, time.Duration) {
	e.n++
	name := "exp" + string(rune('a'+e.n))
	src := filepath.Join(e.home, "src", name)
	require.NoError(e.t, os.MkdirAll(src, 0o700))
	require.NoError(e.t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte("[plugin]\nname = \""+name+
		"\"\nversion = \"1.0.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \""+name+"\"\nbinary = \"run.sh\"\n"), 0o644))
	require.NoError(e.t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	out, took, err := e.run("", extraEnv, "--ni", "plugins", "install", src)
	require.NoError(e.t, err, "install: %s", out)
	return out, took
}

func (e *exportEnv) lastSeq() uint64 {
	var last uint64
	require.NoError(e.t, audit.Read(e.log, func(r *audit.Record) error { last = r.Seq; return nil }))
	return last
}

func (e *exportEnv) doctorExport() map[string]any {
	out, _, err := e.run("", nil, "doctor", "--json")
	require.NoError(e.t, err, out)
	var d map[string]any
	require.NoError(e.t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &d), out)
	x, _ := d["audit_export"].(map[string]any)
	require.NotNil(e.t, x, out)
	return x
}

func seqSet(got []collectortest.Got) map[uint64]collectortest.Got {
	m := map[uint64]collectortest.Got{}
	for _, g := range got {
		m[g.Seq()] = g
	}
	return m
}

// A short-lived fledge process sends the records it wrote before it exits, with the API key
// from the secrets store in a header and nowhere in the log; a collector that is down costs
// the process at most the bounded wait, and the next process sends the backlog.
func TestAuditExportFromShortLivedProcesses(t *testing.T) {
	col := collectortest.StartWithHeader(t, "x-api-key")
	e := newExportEnv(t)
	const key = "otlp-api-key-4f1c9e"
	out, _, err := e.run(key, nil, "secrets", "set", "OTLP_KEY")
	require.NoError(t, err, out)
	base := strings.TrimSuffix(col.URL(), "/v1/logs")
	e.config("[audit]\nexport = \"otlp\"\notlp_endpoint = \"" + base + "\"\notlp_headers = { \"x-api-key\" = \"OTLP_KEY\" }\n")

	e.install()
	last := e.lastSeq()
	got := seqSet(col.Received())
	for seq := uint64(1); seq <= last; seq++ {
		g, ok := got[seq]
		require.True(t, ok, "seq %d of %d was not sent before the process exited", seq, last)
		assert.Equal(t, key, g.Header, "seq %d: the API key header", seq)
	}
	events := map[any]bool{}
	for _, g := range got {
		events[g.Attributes["fledge.event"]] = true
	}
	assert.True(t, events["install"], "no install record among %v", events)
	b, err := os.ReadFile(e.log)
	require.NoError(t, err)
	require.NotContains(t, string(b), key, "the API key is in the audit log")
	x := e.doctorExport()
	assert.EqualValues(t, last, x["acked_seq"])
	assert.EqualValues(t, 0, x["backlog"])
	assert.Equal(t, col.URL(), x["endpoint"])

	// The collector is down: the process still ends within the bound, and keeps the records.
	col.Kill()
	out, took := e.install()
	assert.Less(t, took, 8*time.Second, "a process waited %s for a collector that is down", took)
	assert.Contains(t, out, "audit export")
	x = e.doctorExport()
	assert.NotZero(t, x["backlog"], "doctor shows no backlog with the collector down")
	down := e.lastSeq()

	// It is back; OTEL_EXPORTER_OTLP_ENDPOINT names it now that config.toml says nothing.
	col.Restart()
	e.config("[audit]\nexport = \"otlp\"\notlp_protocol = \"http/json\"\notlp_headers = { \"x-api-key\" = \"OTLP_KEY\" }\n")
	e.install("OTEL_EXPORTER_OTLP_ENDPOINT=" + base)
	got = seqSet(col.Received())
	for seq, end := uint64(1), e.lastSeq(); seq <= end; seq++ {
		if _, ok := got[seq]; !ok {
			t.Fatalf("seq %d (backlog up to %d) never arrived", seq, down)
		}
	}

	// By hand: a range is sent again, and the cursor stays.
	before := len(col.Received())
	out, _, err = e.run("", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + base}, "audit", "export", "--since", "1h", "--event", "install")
	require.NoError(t, err, out)
	assert.Contains(t, out, "3 records sent to "+col.URL())
	assert.Equal(t, before+3, len(col.Received()))
}

func TestAuditExportOffIsAUsageError(t *testing.T) {
	e := newExportEnv(t)
	out, _, err := e.run("", nil, "audit", "export")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, out, `export = "otlp"`)
}

// A collector that takes the connection and never answers holds a process up for at most
// the bounded wait at exit (otlp.DefaultExitWait, 2 s); the records stay in the backlog.
func TestAuditExportHungCollectorBoundedWait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // read nothing, answer nothing
		}
	}()
	defer func() {
		for len(held) > 0 {
			(<-held).Close()
		}
	}()
	e := newExportEnv(t)
	e.config("[audit]\nexport = \"otlp\"\notlp_endpoint = \"http://" + ln.Addr().String() + "\"\n")
	_, took := e.install()
	t.Logf("install with a hung collector took %s", took)
	assert.GreaterOrEqual(t, took, 2*time.Second-100*time.Millisecond, "the process did not wait for the collector at all")
	assert.Less(t, took, 5*time.Second, "the process waited past the bound")
	x := e.doctorExport()
	assert.EqualValues(t, e.lastSeq(), x["backlog"])
}

// fledge killed with -9 while it sends a backlog at exit: nothing is lost, the next
// processes send the rest from the cursor.
func TestAuditExportFledgeKilledMidExport(t *testing.T) {
	col := collectortest.Start(t)
	e := newExportEnv(t)
	// A backlog: records written while export was off.
	l, err := audit.Open(e.log, audit.Options{Fsync: audit.FsyncNever})
	require.NoError(t, err)
	for i := 0; i < 20000; i++ {
		require.NoError(t, l.Append(&audit.Record{Event: audit.EventExecDecision, Decision: audit.Allow, Reason: "ok",
			Session: "backlog", Details: map[string]any{"command": "true"}}, false))
	}
	require.NoError(t, l.Close())
	e.config("[audit]\nexport = \"otlp\"\notlp_endpoint = \"" + col.URL() + "\"\n")

	e.n++
	src := filepath.Join(e.home, "src", "killed")
	require.NoError(t, os.MkdirAll(src, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte("[plugin]\nname = \"killed\"\nversion = \"1.0.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"killed\"\nbinary = \"run.sh\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	cmd := exec.Command(e.fledge, "--ni", "plugins", "install", src)
	cmd.Env = e.env
	require.NoError(t, cmd.Start())
	var cur audit.Position
	deadline := time.Now().Add(30 * time.Second)
	for cur.Seq == 0 && time.Now().Before(deadline) {
		cur, _ = audit.ReadCursor(e.log)
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	cur, err = audit.ReadCursor(e.log)
	require.NoError(t, err)
	last := e.lastSeq()
	require.NotZero(t, cur.Seq, "fledge acknowledged nothing within 30s")
	require.Less(t, cur.Seq, last, "fledge sent everything before the kill: the test proves nothing")
	t.Logf("killed with the cursor at seq %d of %d", cur.Seq, last)

	// The next fledge processes send the rest (each within its bounded wait at exit).
	runs := 0
	for runs < 10 {
		runs++
		e.install()
		if x := e.doctorExport(); x["backlog"] == float64(0) {
			break
		}
	}
	t.Logf("%d more fledge processes sent the rest", runs)
	assert.EqualValues(t, 0, e.doctorExport()["backlog"])
	got := seqSet(col.Received())
	for seq, end := uint64(1), e.lastSeq(); seq <= end; seq++ {
		if _, ok := got[seq]; !ok {
			t.Fatalf("seq %d never arrived", seq)
		}
	}
}
