// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allGrants = protocol.Capabilities{Exec: true, Store: true, Metadata: true, Filesystem: "none"}

func msg(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func TestBashHelloPlugin(t *testing.T) {
	f := newFixture(t, "hello.sh", allGrants)
	out := f.run()
	assert.Equal(t, 0, out.ExitCode)
	stdout := f.stdout.String()
	assert.Contains(t, stdout, `init={"type":"init","protocol":"fledge-v1"`)
	assert.Contains(t, stdout, `reply={"type":"response","id":"p1","value":"world"}`)
	assert.Contains(t, stdout, `reply={"type":"response","id":"l1","value":"yes"}`)
	assert.Contains(t, stdout, `"stdout":"from-exec\n2\n"`)
	assert.Contains(t, f.stderr.String(), "hello from bash")
}

func TestInitMessage(t *testing.T) {
	f := newFixture(t, "scripted.py", protocol.Capabilities{Store: true, Filesystem: "none"})
	_, rep := f.runScript()
	in := rep.Init
	assert.Equal(t, "init", in.Type)
	assert.Equal(t, protocol.Version, in.Protocol)
	assert.Equal(t, "tp", in.Command)
	assert.Nil(t, in.Project, "no project was given: project must be null")
	assert.Equal(t, "tp", in.Plugin.Name)
	assert.Equal(t, "1.0.0", in.Plugin.Version)
	assert.Equal(t, f.pluginDir, in.Plugin.Dir)
	assert.Equal(t, "test", in.Fledge.Version)
	assert.Equal(t, protocol.Capabilities{Store: true, Filesystem: "none"}, in.Capabilities)
	require.NotNil(t, in.Sandbox)
	assert.NotEmpty(t, in.Sandbox.Confinement)
}

func TestEveryMessageNonInteractive(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	out, rep := f.runScript(
		msg("type", "output", "text", "plain output\n"),
		msg("type", "log", "level", "warn", "message", "careful"),
		msg("type", "progress", "message", "step", "current", 1, "total", 3),
		msg("type", "progress", "message", "spin"),
		msg("type", "progress", "done", true),
		msg("type", "prompt", "id", "1", "message", "Target?", "default", "staging"),
		msg("type", "prompt", "id", "2", "message", "No default?"),
		msg("type", "confirm", "id", "3", "message", "Sure?", "default", true),
		msg("type", "confirm", "id", "4", "message", "Sure?"),
		msg("type", "select", "id", "5", "message", "Env?", "options", []string{"dev", "prod"}, "default", 1),
		msg("type", "select", "id", "6", "message", "Env?", "options", []string{"dev", "prod"}),
		msg("type", "multi_select", "id", "7", "message", "Regions?", "options", []string{"a", "b", "c"}, "defaults", []int{0, 2}),
		msg("type", "multi_select", "id", "8", "message", "Regions?", "options", []string{"a", "b"}),
		msg("type", "store", "key", "k", "value", "v"),
		msg("type", "load", "id", "9", "key", "k"),
		msg("type", "load", "id", "10", "key", "missing"),
		msg("type", "exec", "id", "11", "command", "echo hi; echo err >&2; exit 4"),
		msg("type", "metadata", "id", "12", "keys", []string{"env", "nope"}),
	)
	assert.Equal(t, 0, out.ExitCode)
	assert.Contains(t, f.stdout.String(), "plain output\n")
	assert.Contains(t, f.stderr.String(), "careful")

	assert.Equal(t, "staging", f.reply(rep, "1")["value"])
	assert.Equal(t, "cancel", f.reply(rep, "2")["type"])
	assert.Equal(t, protocol.CancelNonInteractive, f.reply(rep, "2")["reason"])
	assert.Equal(t, true, f.reply(rep, "3")["value"])
	assert.Equal(t, false, f.reply(rep, "4")["value"])
	assert.Equal(t, "prod", f.reply(rep, "5")["value"])
	assert.Equal(t, "cancel", f.reply(rep, "6")["type"], "select without default must never silently pick option 0")
	assert.Equal(t, []any{"a", "c"}, f.reply(rep, "7")["value"])
	assert.Equal(t, []any{}, f.reply(rep, "8")["value"])
	assert.Equal(t, "v", f.reply(rep, "9")["value"])
	r10 := f.reply(rep, "10")
	assert.Contains(t, r10, "value")
	assert.Nil(t, r10["value"])
	ex := f.reply(rep, "11")["value"].(map[string]any)
	assert.EqualValues(t, 4, ex["code"])
	assert.Equal(t, "hi\n", ex["stdout"])
	assert.Equal(t, "err\n", ex["stderr"])
	md := f.reply(rep, "12")["value"].(map[string]any)
	assert.Contains(t, md, "nope")
	assert.Nil(t, md["nope"], "unknown metadata keys are null")
	env := md["env"].(map[string]any)
	assert.Equal(t, "/usr/local/bin:/usr/bin:/bin", env["PATH"])
	assert.NotContains(t, env, "GITHUB_TOKEN")

	// The stored value went to state.json through the host.
	data, err := os.ReadFile(filepath.Join(f.pluginDir, "state.json"))
	require.NoError(t, err)
	assert.Contains(t, string(data), `"k"`)
}

// TestCapabilitiesDenied: exec, store, load and metadata of a plugin that holds none of
// them are refused and each refusal is on record, with the reason an auditor needs: the
// manifest never declared it (capability_not_declared), or it declared it and the user did
// not grant it (capability_not_granted).
func TestCapabilitiesDenied(t *testing.T) {
	for _, tc := range []struct {
		name     string
		declared protocol.Capabilities
		want     string
	}{
		{"not declared", protocol.Capabilities{}, "capability_not_declared"},
		{"declared, not granted", protocol.Capabilities{Exec: true, Store: true, Metadata: true}, "capability_not_granted"},
	} {
		t.Run(tc.name, func(t *testing.T) { testCapabilitiesDenied(t, tc.declared, tc.want) })
	}
}

func testCapabilitiesDenied(t *testing.T, declared protocol.Capabilities, want string) {
	f := newFixture(t, "scripted.py", protocol.Capabilities{Filesystem: "none"})
	f.opts.Declared = declared
	marker := filepath.Join(f.project, "exec-ran")
	_, rep := f.runScript(
		msg("type", "exec", "id", "1", "command", "touch "+marker),
		msg("type", "store", "key", "k", "value", "v"),
		msg("type", "load", "id", "2", "key", "k"),
		msg("type", "metadata", "id", "3", "keys", []string{"env", "git_tags"}),
	)
	ex := f.reply(rep, "1")["value"].(map[string]any)
	assert.EqualValues(t, 126, ex["code"])
	assert.Contains(t, ex["stderr"], "not granted")
	assert.Equal(t, want, ex["reason"], "the reply's reason")
	assert.NoFileExists(t, marker, "a denied exec must not run")
	assert.Nil(t, f.reply(rep, "2")["value"])
	assert.Equal(t, map[string]any{}, f.reply(rep, "3")["value"])
	assert.NoFileExists(t, filepath.Join(f.pluginDir, "state.json"), "a denied store is dropped")

	denies := 0
	for _, r := range f.auditRecords() {
		if r.Decision == audit.Deny && r.Reason == want {
			denies++
		}
	}
	assert.Equal(t, 4, denies, "exec, store, load and metadata denials are each recorded as %s", want)
}

func TestErrorTable(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	out, rep := f.runScript(
		"this is not json",
		`{"type":"output","text":`,
		msg("type", "teleport", "id", "t1", "_nowait", true),
		msg("type", "prompt", "message", "no id"),
		msg("type", "response", "id", "nobody-asked", "value", 1, "_nowait", true),
		msg("_bigline", 2<<20),
		msg("type", "exec", "id", "1", "command", "sleep 5", "timeout", 0.5),
		msg("type", "exec", "id", "2", "command", "pwd", "cwd", "../.."),
		msg("type", "exec", "id", "3", "command", "true", "timeout", -1),
		msg("type", "exec", "id", "4", "command", "true", "timeout", 10000),
		msg("type", "select", "id", "5", "message", "no options", "options", []string{}),
		msg("type", "exec", "id", "6", "command", ""),
		msg("type", "output", "text", "still alive\n"),
	)
	assert.Equal(t, 0, out.ExitCode)
	assert.Contains(t, f.stdout.String(), "still alive")
	assert.NotContains(t, f.stdout.String(), strings.Repeat("x", 100), "an over-long line is skipped")
	ex := f.reply(rep, "1")["value"].(map[string]any)
	assert.EqualValues(t, 124, ex["code"], "timeout is never success")
	assert.Equal(t, true, ex["timed_out"])
	esc := f.reply(rep, "2")["value"].(map[string]any)
	assert.EqualValues(t, 126, esc["code"])
	assert.Equal(t, "path_escape", esc["reason"])
	assert.Contains(t, esc["stderr"], "cwd")
	assert.EqualValues(t, 126, f.reply(rep, "3")["value"].(map[string]any)["code"])
	// Over timeout_max: clamped to it and run, as the Rust fledge host does.
	clamped := f.reply(rep, "4")["value"].(map[string]any)
	assert.EqualValues(t, 0, clamped["code"])
	assert.Contains(t, clamped["stderr"], "clamped to the maximum")
	assert.Equal(t, "cancel", f.reply(rep, "5")["type"], "an invalid request with an id still gets its one reply")
	assert.EqualValues(t, 126, f.reply(rep, "6")["value"].(map[string]any)["code"])
	assert.GreaterOrEqual(t, out.Malformed, 5)
	warn := f.stderr.String()
	assert.Contains(t, warn, "malformed")
	assert.Contains(t, warn, `orphaned response (id "nobody-asked")`, "the warning names the id")

	require.Len(t, f.findRecords(audit.EventCwdRefused), 1)
	assert.Equal(t, "path_escape", f.findRecords(audit.EventCwdRefused)[0].Reason)
	require.Len(t, f.findRecords(audit.EventMalformed), 1)
	outcomes := map[string]string{}
	for _, r := range f.findRecords(audit.EventExecOutcome) {
		outcomes[fmt.Sprint(r.Details[audit.DetailCommand])] = r.Reason
	}
	assert.Equal(t, map[string]string{"sleep 5": "timeout", "true": "ok"}, outcomes)
}

func TestExitCodePassedOn(t *testing.T) {
	f := newFixture(t, "exitcode.sh", allGrants)
	out := f.run()
	assert.Equal(t, 3, out.ExitCode)
	assert.Contains(t, f.stdout.String(), "bye")
	exits := f.findRecords(audit.EventPluginExit)
	require.Len(t, exits, 1)
	assert.Equal(t, "3", fmt.Sprint(exits[0].Details["exit_code"]))
}

func TestExecOutputBoundsAndEncoding(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	f.opts.Limits.OutputCap = 1000
	_, rep := f.runScript(
		msg("type", "exec", "id", "1", "command", "head -c 300000 /dev/zero | tr '\\0' a"),
		msg("type", "exec", "id", "2", "command", `printf 'ok\377\376end'`),
	)
	big := f.reply(rep, "1")["value"].(map[string]any)
	assert.Len(t, big["stdout"], 1000)
	assert.Equal(t, true, big["stdout_truncated"])
	bin := f.reply(rep, "2")["value"].(map[string]any)
	assert.Equal(t, "ok\uFFFD\uFFFDend", bin["stdout"], "invalid UTF-8 becomes U+FFFD")
}

func TestPipelinedExecsAndQueueBound(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	f.opts.Limits.ConcurrentExecs = 2
	f.opts.Limits.ExecQueue = 2
	steps := []any{}
	for i := 0; i < 8; i++ {
		steps = append(steps, msg("type", "exec", "id", string(rune('a'+i)), "command", "sleep 0.4; echo done", "_pipeline", true))
	}
	steps = append(steps, msg("_wait_all", true))
	_, rep := f.runScript(steps...)
	ok, refused := 0, 0
	for i := 0; i < 8; i++ {
		v := f.reply(rep, string(rune('a'+i)))["value"].(map[string]any)
		switch v["code"] {
		case float64(0):
			ok++
			assert.Equal(t, "done\n", v["stdout"])
		case float64(126):
			refused++
			assert.Equal(t, "limit_exceeded", v["reason"])
		}
	}
	assert.Equal(t, 8, ok+refused, "every request gets exactly one reply")
	assert.GreaterOrEqual(t, ok, 4, "2 running + 2 queued are always accepted")
	assert.GreaterOrEqual(t, refused, 1, "past the queue bound, execs are refused")
}

func TestInterruptCancelsThenKills(t *testing.T) {
	f := newFixture(t, "sleeper.sh", allGrants)
	sigs := make(chan os.Signal, 1)
	f.opts.Signals = sigs
	go func() {
		time.Sleep(500 * time.Millisecond)
		sigs <- os.Interrupt
	}()
	out := f.run()
	assert.True(t, out.Interrupted)
	assert.Equal(t, 130, out.ExitCode)
	require.NotNil(t, out.Result)
	assert.Equal(t, "SIGKILL", out.Result.Signal, "a plugin ignoring cancel and SIGTERM is killed")
}

func TestResponsesAreJSONLines(t *testing.T) {
	// Every line fledge writes to a plugin must parse on its own.
	f := newFixture(t, "scripted.py", allGrants)
	_, rep := f.runScript(msg("type", "exec", "id", "1", "command", `printf 'a\nb\r\n\000\033[2J'`))
	raw := rep.Replies["1"]
	assert.True(t, json.Valid(raw))
	v := f.reply(rep, "1")["value"].(map[string]any)
	assert.Equal(t, "a\nb\r\n\x00\x1b[2J", v["stdout"])
}

// TestStateFileOutOfReach: the host's state.json sits in the plugin dir, but neither an exec
// nor the plugin process can read or replace it; the plugin's own files stay readable and
// the only way to its data is load/store through the host.
func TestStateFileOutOfReach(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	state := filepath.Join(f.pluginDir, "state.json")
	_, rep := f.runScript(
		msg("type", "store", "key", "token", "value", "s3cret-value"),
		msg("type", "load", "id", "1", "key", "token"),
		msg("type", "exec", "id", "2", "command", "cat "+state),
		msg("type", "exec", "id", "3", "command", "echo '{\"token\":\"forged\"}' > "+state),
		msg("type", "exec", "id", "4", "command", "head -c 20 "+filepath.Join(f.pluginDir, "scripted.py")),
	)
	assert.Equal(t, "s3cret-value", f.reply(rep, "1")["value"])
	read := f.reply(rep, "2")["value"].(map[string]any)
	assert.NotEqual(t, float64(0), read["code"])
	assert.NotContains(t, read["stdout"], "s3cret")
	write := f.reply(rep, "3")["value"].(map[string]any)
	assert.NotEqual(t, float64(0), write["code"])
	data, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Contains(t, string(data), "s3cret-value", "state.json is unchanged")
	assert.NotContains(t, string(data), "forged")
	own := f.reply(rep, "4")["value"].(map[string]any)
	assert.EqualValues(t, 0, own["code"], "the plugin's own files stay readable: %v", own["stderr"])
	assert.Contains(t, own["stdout"], "#!/usr/bin/python3")
}

// TestNoAuditNoExec: audit before act. When the decision cannot be recorded, the command
// does not run and the plugin gets a refusal, not silence.
func TestNoAuditNoExec(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	marker := filepath.Join(f.project, "ran")
	steps, err := json.Marshal([]any{
		msg("_sleep", 1.0), // the test breaks the log meanwhile
		msg("type", "exec", "id", "1", "command", "touch "+marker),
	})
	require.NoError(t, err)
	f.opts.Args = []string{string(steps)}
	type result struct {
		out *Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := Run(context.Background(), f.opts)
		done <- result{out, err}
	}()
	// Once the start is on record, the log stops being writable (the real log, closed).
	require.Eventually(t, func() bool { return len(f.findRecords(audit.EventPluginStart)) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, f.opts.Audit.(*audit.Log).Close())
	r := <-done
	require.Error(t, r.err, "the session reports that records were lost")
	assert.Contains(t, r.err.Error(), "audit log")
	require.NotNil(t, r.out)
	var rep scriptReport
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep))
	v := f.reply(rep, "1")["value"].(map[string]any)
	assert.EqualValues(t, 126, v["code"])
	assert.Contains(t, v["stderr"], "audit log")
	assert.NoFileExists(t, marker)
}

// TestNoAuditNoPlugin: a log that cannot record the start means the plugin does not run.
func TestNoAuditNoPlugin(t *testing.T) {
	f := newFixture(t, "exitcode.sh", allGrants)
	require.NoError(t, f.opts.Audit.(*audit.Log).Close())
	out, err := Run(context.Background(), f.opts)
	require.ErrorIs(t, err, ErrLaunch)
	assert.Contains(t, err.Error(), "audit log")
	assert.Nil(t, out)
	assert.NotContains(t, f.stdout.String(), "bye", "the plugin never ran")
}

// TestExecTmpPrivateAndRemoved: execs get a private TMPDIR (not the shared /tmp), can write
// it, and it is gone when the session ends.
func TestExecTmpPrivateAndRemoved(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	_, rep := f.runScript(
		msg("type", "exec", "id", "1", "command", `touch "$TMPDIR/scratch" && echo "$TMPDIR"`),
		msg("type", "exec", "id", "2", "command", `touch /tmp/fledge-shared-tmp-probe`),
	)
	v := f.reply(rep, "1")["value"].(map[string]any)
	require.EqualValues(t, 0, v["code"], v["stderr"])
	dir := strings.TrimSpace(v["stdout"].(string))
	assert.NotEqual(t, os.TempDir(), dir)
	assert.True(t, filepath.IsAbs(dir))
	assert.NoDirExists(t, dir, "removed with the session")
	shared := f.reply(rep, "2")["value"].(map[string]any)
	assert.NotEqual(t, float64(0), shared["code"], "the shared /tmp is not writable")
	assert.NoFileExists(t, "/tmp/fledge-shared-tmp-probe")
}

// TestPipelinedMetadata: many metadata requests at once are all answered (they queue for
// the few metadata slots rather than each running git at once).
func TestPipelinedMetadata(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	var steps []any
	for i := 0; i < 20; i++ {
		steps = append(steps, msg("type", "metadata", "id", fmt.Sprint("m", i), "keys", []string{"env", "git_status"}, "_pipeline", true))
	}
	steps = append(steps, msg("_wait_all", true))
	_, rep := f.runScript(steps...)
	for i := 0; i < 20; i++ {
		v := f.reply(rep, fmt.Sprint("m", i))["value"].(map[string]any)
		assert.Contains(t, v, "env")
	}
}

// TestExecCannotReachHostUnixSockets: through a real plugin's exec, a command cannot
// connect to a unix socket of the host (a stand-in for docker.sock or the D-Bus bus).
func TestExecCannotReachHostUnixSockets(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	_, rep := f.runScript(msg("type", "exec", "id", "1",
		"command", `/usr/bin/python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print("CONNECTED")' `+sock))
	v := f.reply(rep, "1")["value"].(map[string]any)
	assert.NotEqual(t, float64(0), v["code"])
	assert.NotContains(t, v["stdout"], "CONNECTED")
	assert.Contains(t, v["stderr"], "Permission denied")
}

// TestAuditSpamBounded: a plugin spamming denied requests cannot grow the audit log
// without bound: past the per-kind bound the records are counted and summed up once.
func TestAuditSpamBounded(t *testing.T) {
	f := newFixture(t, "scripted.py", protocol.Capabilities{Filesystem: "none"}) // no store grant
	const n = core.MaxRepeatRecords + 500
	steps := make([]any, 0, n)
	for i := 0; i < n; i++ {
		steps = append(steps, msg("type", "store", "key", "k", "value", "v"))
	}
	f.runScript(steps...)
	stores := f.findRecords(audit.EventStore)
	assert.Len(t, stores, core.MaxRepeatRecords)
	sup := f.findRecords(audit.EventSuppressed)
	require.Len(t, sup, 1)
	counts := sup[0].Details["suppressed"].(map[string]any)
	assert.Equal(t, "500", fmt.Sprint(counts["store/deny/capability_not_declared"]), "the fixture's manifest declares nothing")
	rep, err := audit.Verify(f.auditPath)
	require.NoError(t, err)
	assert.True(t, rep.OK)
}
