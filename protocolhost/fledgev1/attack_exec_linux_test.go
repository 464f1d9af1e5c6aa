// SPDX-License-Identifier: MIT

package fledgev1

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The exec attacks, sent the way a hostile plugin would: as exec requests from a real
// plugin process (attack_exec.py) that was granted exec. fledge cannot know in advance what
// a shell command will touch, so each exec is allowed (exec_decision allow) and the sandbox
// must stop the effect. Each test checks the effect on disk, in the process table, in the
// audit log, and that the host answers the next exec of the same session.

var execGrant = protocol.Capabilities{Exec: true, Filesystem: "none"}

// hangGuard bounds how long a reply may take before a test calls it a hang. It is not a
// speed claim: the machine running the tests is shared and slow.
const hangGuard = 10.0 // seconds

type attackExec struct {
	id, command string
}

// execSteps turns commands into exec steps, ending with an `echo alive` that proves the
// host still serves the session.
func execSteps(cmds []attackExec, timeout float64) []any {
	var steps []any
	for _, c := range cmds {
		m := msg("type", "exec", "id", c.id, "command", c.command)
		if timeout > 0 {
			m["timeout"] = timeout
		}
		steps = append(steps, m)
	}
	return append(steps, msg("type", "exec", "id", "alive", "command", "echo alive"))
}

func (f *fixture) assertAlive(rep scriptReport) {
	f.t.Helper()
	v := f.execValue(rep, "alive")
	assert.EqualValues(f.t, 0, v["code"], "the host must serve the next exec: %v", v)
	assert.Equal(f.t, "alive\n", v["stdout"])
}

func TestAttackExecFilesystem(t *testing.T) {
	f := newFixture(t, "attack_exec.py", execGrant)
	s := plantSecrets(t, f)
	id := uniq(t)
	homeTarget := filepath.Join(f.home, "pwned-"+id)
	tmpTarget := filepath.Join(os.TempDir(), "fledge-pwned-"+id)
	t.Cleanup(func() { _ = os.Remove(tmpTarget) })
	ownState := filepath.Join(f.pluginDir, "state.json")
	planted := filepath.Join(f.pluginDir, "planted-"+id)
	okFile := filepath.Join(f.project, "ok-"+id)

	writes := []attackExec{
		{"write_home", "echo pwned > " + homeTarget},
		{"write_tmp", "echo pwned > " + tmpTarget},
		{"append_plugins_toml", "printf '[plugin.granted]\\nexec = true\\n' >> " + s.tomlPath},
		{"remove_plugins_toml", "rm " + s.tomlPath}, // not -f: in a private filesystem view the file does not exist, and rm -f of nothing succeeds
		{"overwrite_config", "echo '[sandbox]' > " + s.configPath},
		{"overwrite_other_state", `echo '{"token":"mine"}' > ` + s.otherState},
		{"forge_audit", `echo '{"event":"forged-` + id + `"}' >> ` + f.auditPath},
		{"write_own_state", `echo '{"granted":"everything"}' > ` + ownState},
		// Links fledge would meet at the next start: state.json, the data dir itself.
		{"symlink_own_state", "ln -sf /etc/passwd " + ownState},
		{"symlink_data_dir", "mv " + f.dataDir + " " + f.dataDir + ".moved && ln -s /etc " + f.dataDir},
		{"plant_plugin_dir", "touch " + planted},
	}
	reads := []attackExec{
		{"read_ssh", "cat " + s.sshPath},
		{"read_aws", "cat " + s.awsPath},
		{"list_config", "ls -laR " + f.configDir},
		{"read_plugins_toml", "cat " + s.tomlPath},
		{"read_config", "cat " + s.configPath},
		{"read_other_state", "cat " + s.otherState},
		{"read_audit", "cat " + f.auditPath},
		{"read_host_environ", fmt.Sprintf("cat /proc/%d/environ", os.Getpid())},
		{"sweep_home", "find " + f.home + " -type f -exec cat {} +"},
	}
	control := attackExec{"project_write", "echo ok > " + okFile + " && cat " + okFile}
	cmds := append(append(append([]attackExec{}, writes...), reads...), control)
	_, rep := f.runScript(execSteps(cmds, 0)...)

	for _, c := range append(writes, reads...) {
		t.Run(c.id, func(t *testing.T) {
			v := f.execValue(rep, c.id)
			assert.NotEqualValues(t, 0, v["code"], "the sandbox must make %q fail: %v", c.command, v)
			s.assertNoLeak(t, "stdout", fmt.Sprint(v["stdout"]))
			s.assertNoLeak(t, "stderr", fmt.Sprint(v["stderr"]))
			// The audit log shows what fledge decided and how the command ended.
			assert.Equal(t, audit.Allow, f.decisionFor(c.command).Decision)
			out := f.outcomeFor(c.command)
			assert.NotEqualValues(t, 0, num(out.Details[audit.DetailExitCode]))
			assert.Equal(t, string(reason.OK), out.Reason, "a command that fails is not a sandbox event")
		})
	}
	v := f.execValue(rep, control.id)
	assert.EqualValues(t, 0, v["code"], "the project is writable (the sandbox is not just broken): %v", v)
	assert.Equal(t, "ok\n", v["stdout"])
	f.assertAlive(rep)

	// On disk: nothing written outside, the host's files untouched byte for byte.
	assert.NoFileExists(t, homeTarget)
	assert.NoFileExists(t, tmpTarget)
	assert.NoFileExists(t, ownState)
	assert.NoFileExists(t, planted)
	fileUnchanged(t, s.tomlPath, s.tomlBytes)
	fileUnchanged(t, s.otherState, []byte(`{"token":"`+s.other+`"}`))
	fileUnchanged(t, s.configPath, []byte("# "+s.config+"\n[sandbox]\n"))
	raw, err := os.ReadFile(f.auditPath)
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		assert.False(t, strings.HasPrefix(line, `{"event":"forged-`), "a forged line reached the audit log: %s", line)
	}
	vr, err := audit.Verify(f.auditPath)
	require.NoError(t, err)
	assert.True(t, vr.OK, "audit chain: %+v", vr.Break)
	s.assertNoLeak(t, "the host's stdout", f.stdout.String())
}

func TestAttackExecEnvSecrets(t *testing.T) {
	f := newFixture(t, "attack_exec.py", execGrant)
	secrets := map[string]string{
		"GITHUB_TOKEN":          "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"AWS_ACCESS_KEY_ID":     "AKIAIOSFODNN7EXAMPLE",
		// Value-only secrets: names the policy allow-list lets through, values that are
		// credentials all the same.
		"MYVAR":    "https://user:pw-" + uniq(t) + "@git.example.com/repo.git",
		"LC_EXTRA": "Bearer abcdefghijklmnopqrstuvwxyz012345",
		"MYTOOL":   "sk-" + uniq(t) + uniq(t),
	}
	environ := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + f.home, "LANG=C.UTF-8", "MYHARMLESS=visible-" + uniq(t)}
	for k, v := range secrets {
		environ = append(environ, k+"="+v)
	}
	f.setEnviron(environ, []string{"MYVAR", "MYTOOL", "MYHARMLESS"})
	_, rep := f.runScript(execSteps([]attackExec{
		{"env", "env"},
		{"set", "set"},
		{"proc_self", "cat /proc/self/environ | tr '\\0' '\\n'"},
		{"host_environ", fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ", os.Getpid())},
	}, 0)...)

	env := fmt.Sprint(f.execValue(rep, "env")["stdout"])
	assert.Contains(t, env, "PATH=/usr/local/bin:/usr/bin:/bin", "the minimal environment is there")
	assert.Contains(t, env, "MYHARMLESS=visible-", "the policy allow-list is honoured")
	for _, id := range []string{"env", "set", "proc_self", "host_environ"} {
		v := f.execValue(rep, id)
		for name, val := range secrets {
			assert.NotContains(t, fmt.Sprint(v["stdout"]), val, "%s shows %s", id, name)
			assert.NotContains(t, fmt.Sprint(v["stdout"]), name+"=", "%s shows %s", id, name)
		}
	}
	host := f.execValue(rep, "host_environ")
	assert.NotEqualValues(t, 0, host["code"], "the host's /proc environ is out of reach (Landlock ptrace scoping): %v", host)
	assert.NotContains(t, fmt.Sprint(host["stdout"]), "FLEDGE_CONTAIN_STAGE")
	f.assertAlive(rep)
	// Nothing of the filtered environment reaches the audit log either.
	raw, err := os.ReadFile(f.auditPath)
	require.NoError(t, err)
	for name, val := range secrets {
		assert.NotContains(t, string(raw), val, "audit log holds %s", name)
	}
}

// The process-tree attacks: whatever a command starts must be gone by the time its reply
// arrives. A scan inside the sandbox by the next exec proves "by the reply" (not merely by
// the end of the session); a scan of /proc by the test after the session confirms it.
func TestAttackExecProcessTree(t *testing.T) {
	f := newFixture(t, "attack_exec.py", execGrant)
	setsidM, daemonM, bgM, ctlM := sleepMarker(t), sleepMarker(t), sleepMarker(t), sleepMarker(t)
	scan := func(m string) string {
		return "if grep -l '" + notSelf(m) + "' /proc/[0-9]*/cmdline 2>/dev/null; then echo SURVIVOR; else echo none; fi"
	}
	timeout := 1.0
	steps := []any{
		// A setsid child that ignores SIGTERM (SIG_IGN survives exec), outliving a timeout.
		msg("type", "exec", "id", "setsid", "timeout", timeout,
			"command", "setsid sh -c 'trap \"\" TERM; sleep "+spell(setsidM)+"' & trap '' TERM; sleep "+spell(setsidM)),
		msg("type", "exec", "id", "setsid_scan", "command", scan(setsidM)),
		// A double-forked daemon (its parent exits at once) after a normal exit.
		msg("type", "exec", "id", "daemon",
			"command", "(setsid sh -c 'sleep "+spell(daemonM)+"' </dev/null >/dev/null 2>&1 &); echo parent-done"),
		msg("type", "exec", "id", "daemon_scan", "command", scan(daemonM)),
		// A background child still holding stdout and stderr: the reply must not wait for it.
		msg("type", "exec", "id", "bg", "command", "sleep "+spell(bgM)+" & echo started"),
		msg("type", "exec", "id", "bg_scan", "command", scan(bgM)),
		// Control: the same scan sees a process that is alive, so "none" above means gone.
		msg("type", "exec", "id", "control", "command", "sleep "+spell(ctlM)+" & sleep 0.3; "+scan(ctlM)),
		msg("type", "exec", "id", "alive", "command", "echo alive"),
	}
	_, rep := f.runScript(steps...)
	assert.Contains(t, f.execValue(rep, "control")["stdout"], "SURVIVOR", "the scan cannot see live processes")

	st := f.execValue(rep, "setsid")
	assert.EqualValues(t, 124, st["code"], "a timeout is never success: %v", st)
	assert.Equal(t, true, st["timed_out"])
	assert.Equal(t, string(reason.Timeout), st["reason"])
	assert.Less(t, num(f.reply(rep, "setsid")["elapsed"]), hangGuard)

	d := f.execValue(rep, "daemon")
	assert.EqualValues(t, 0, d["code"], "%v", d)
	assert.Equal(t, "parent-done\n", d["stdout"])

	bg := f.execValue(rep, "bg")
	assert.EqualValues(t, 0, bg["code"], "%v", bg)
	assert.Equal(t, "started\n", bg["stdout"])
	assert.Less(t, num(f.reply(rep, "bg")["elapsed"]), hangGuard, "the reply came while a child still held the pipes")

	for _, id := range []string{"setsid_scan", "daemon_scan", "bg_scan"} {
		v := f.execValue(rep, id)
		assert.Equal(t, "none\n", v["stdout"], "%s: a process outlived its command's reply: %v", id, v)
	}
	f.assertAlive(rep)
	for _, m := range []string{setsidM, daemonM, bgM} {
		assert.Empty(t, survivors(m), "process table after the session: marker %s", m)
	}

	// The audit log: the timeout, and the stragglers the sandbox had to kill.
	to := f.outcomeFor(fmt.Sprint(steps[0].(map[string]any)["command"]))
	assert.Equal(t, string(reason.Timeout), to.Reason)
	assert.Equal(t, true, to.Details[audit.DetailTimedOut])
	assert.GreaterOrEqual(t, num(to.Details[audit.DetailProcsKilled]), 2.0, "the setsid child and the main shell were killed")
	for _, i := range []int{2, 4} {
		out := f.outcomeFor(fmt.Sprint(steps[i].(map[string]any)["command"]))
		assert.Equal(t, string(reason.OK), out.Reason)
		assert.GreaterOrEqual(t, num(out.Details[audit.DetailProcsKilled]), 1.0, "the straggler of %q was killed and counted", out.Details["command"])
	}
}

func TestAttackExecForkBomb(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, "attack_exec.py", execGrant)
	const pids = 64
	f.opts.ExecSpec.Limits.Pids = pids
	m := "forkbomb-" + uniq(t)
	bomb := ": " + m + "; b() { b | b & }; b; sleep 30"
	_, rep := f.runScript(execSteps([]attackExec{{"bomb", bomb}}, 3)...)

	v := f.execValue(rep, "bomb")
	assert.NotEqualValues(t, 0, v["code"], "a fork bomb cannot succeed: %v", v)
	assert.Less(t, num(f.reply(rep, "bomb")["elapsed"]), hangGuard)
	assert.Contains(t, v["stderr"], "Cannot fork", "the pids limit is what stopped the bomb")
	f.assertAlive(rep)
	assert.Empty(t, survivors(m), "no bomb process survives its reply")
	out := f.outcomeFor(bomb)
	// The kernel refusing forks ("Cannot fork" above) is the proof that pids.max held. The
	// killed count is distinct pids signalled over the whole TERM-grace-KILL sequence, during
	// which a bomb refills freed slots, so it may pass pids a little (seen: 58-71 for 64);
	// without a limit it would be in the thousands.
	assert.Greater(t, num(out.Details[audit.DetailProcsKilled]), float64(0), "the tree was killed: %v", out.Details)
	assert.LessOrEqual(t, num(out.Details[audit.DetailProcsKilled]), float64(2*pids), "pids.max held: %v", out.Details)
	t.Logf("fork bomb outcome: reason=%s details=%v", out.Reason, out.Details)
}

func TestAttackExecMemoryBomb(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, "attack_exec.py", execGrant)
	f.opts.ExecSpec.Limits.MemoryBytes = 64 << 20
	bomb := `/usr/bin/python3 -c 'a = []
while True: a.append(b"x" * (1 << 20))'; echo survived`
	_, rep := f.runScript(execSteps([]attackExec{{"bomb", bomb}}, 20)...)

	v := f.execValue(rep, "bomb")
	assert.Equal(t, string(reason.OOMKilled), v["reason"], "%v", v)
	assert.Contains(t, v["stderr"], "out of memory")
	f.assertAlive(rep)
	out := f.outcomeFor(bomb)
	assert.Equal(t, string(reason.OOMKilled), out.Reason)
	assert.Equal(t, audit.Error, out.Decision)
	assert.Equal(t, true, out.Details[audit.DetailOOMKilled])
	assert.Greater(t, num(out.Details[audit.DetailPeakMemory]), float64(32<<20))
}

// vmHWM reads this process's peak resident set (VmHWM) in bytes.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	fh, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// 200 MiB on each stream: the reply is cut at the cap, every byte is still drained (so the
// command is not blocked on a full pipe), and the host's memory does not follow the output.
func TestAttackExecHugeOutput(t *testing.T) {
	f := newFixture(t, "attack_exec.py", execGrant)
	const outputCap = 1 << 20
	f.opts.Limits.OutputCap = outputCap
	runtime.GC()
	// Reset the peak-RSS counter (Linux >= 4.0) so VmHWM measures this test only.
	require.NoError(t, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
	before := vmHWM(t)
	huge := "head -c 200M /dev/zero | tr '\\0' a; head -c 200M /dev/zero | tr '\\0' b >&2"
	_, rep := f.runScript(execSteps([]attackExec{{"huge", huge}}, 120)...)
	grew := vmHWM(t) - before

	v := f.execValue(rep, "huge")
	assert.EqualValues(t, 0, v["code"], "%v", v)
	assert.EqualValues(t, outputCap, v["stdout_len"], "stdout cut at the cap")
	assert.EqualValues(t, outputCap, v["stderr_len"], "stderr cut at the cap")
	assert.Equal(t, true, v["stdout_truncated"])
	assert.Equal(t, true, v["stderr_truncated"])
	assert.Less(t, num(f.reply(rep, "huge")["elapsed"]), 120.0)
	f.assertAlive(rep)
	out := f.outcomeFor(huge)
	assert.EqualValues(t, 200<<20, num(out.Details[audit.DetailStdoutBytes]), "every byte was drained and counted")
	assert.EqualValues(t, 200<<20, num(out.Details[audit.DetailStderrBytes]))
	assert.Equal(t, true, out.Details[audit.DetailOutputTruncate])
	t.Logf("host peak RSS grew by %d KiB for 400 MiB of output", grew>>10)
	if !raceEnabled {
		assert.Less(t, grew, int64(100<<20), "host peak RSS grew by %d MiB for 400 MiB of output", grew>>20)
	}
}

// Binary output at the default cap (10 MiB per stream). JSON escapes a NUL byte to six
// bytes, so before the cap was applied to the encoded reply, 2x10 MiB of NULs encoded to
// ~120 MiB, over the writer's line bound: the reply was never sent and the plugin hung
// forever. Now the reply holds the cap on the wire and arrives.
func TestAttackExecBinaryOutputDefaultCap(t *testing.T) {
	f := newFixture(t, "attack_exec.py", execGrant)
	outputCap := DefaultLimits().OutputCap
	runtime.GC()
	require.NoError(t, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
	before := vmHWM(t)
	bin := "head -c 200M /dev/zero; head -c 200M /dev/zero >&2"
	_, rep := f.runScript(execSteps([]attackExec{{"bin", bin}}, 120)...)
	grew := vmHWM(t) - before

	v := f.execValue(rep, "bin")
	assert.EqualValues(t, 0, v["code"], "%v", v)
	for _, s := range []string{"stdout", "stderr"} {
		assert.Equal(t, true, v[s+"_truncated"])
		assert.Positive(t, num(v[s+"_len"]))
		assert.LessOrEqual(t, num(v[s+"_len"])*6, float64(outputCap), "%s holds the cap once escaped", s)
	}
	f.assertAlive(rep)
	out := f.outcomeFor(bin)
	assert.EqualValues(t, 200<<20, num(out.Details[audit.DetailStdoutBytes]))
	// Bounded by the cap, not by the 400 MiB of output: the reply is streamed from the
	// capture buffers (respondExec), so what remains is those buffers and their growth.
	t.Logf("host peak RSS grew by %d KiB for a reply of 2x%d MiB", grew>>10, outputCap>>20)
	if !raceEnabled {
		assert.Less(t, grew, int64(8*outputCap), "host peak RSS grew by %d MiB", grew>>20)
	}
}

func TestAttackExecKillHost(t *testing.T) {
	f := newFixture(t, "attack_exec.py", execGrant)
	canary, alive := startCanary(t)
	host := os.Getpid()
	cmds := []attackExec{
		{"kill_host", fmt.Sprintf("kill -9 %d", host)},
		{"term_host", fmt.Sprintf("kill -TERM %d", host)},
		{"kill_canary", fmt.Sprintf("kill -9 %d", canary)},
		{"kill_canary_group", fmt.Sprintf("kill -9 -%d", canary)},
	}
	if testutil.Contained() {
		// kill(-1) as root reaches every process on the machine if scoping fails: only in
		// the containment harness, where the damage stays inside a throwaway pid namespace.
		cmds = append(cmds, attackExec{"kill_all", "kill -9 -1; echo rc=$?"})
	}
	_, rep := f.runScript(execSteps(cmds, 5)...)

	for _, c := range cmds {
		v := f.execValue(rep, c.id)
		if c.id == "kill_all" {
			// kill(-1) succeeds when there is nothing it may signal; what counts is below.
			assert.Less(t, num(f.reply(rep, c.id)["elapsed"]), hangGuard)
			continue
		}
		assert.NotEqualValues(t, 0, v["code"], "%s must fail (signals are scoped to the sandbox): %v", c.id, v)
	}
	f.assertAlive(rep)
	assert.True(t, alive(), "the canary outside the sandbox was killed")
	if !testutil.Contained() {
		t.Log("kill -9 -1 not attempted: needs the containment harness")
	}
	// The audit log shows the exec decisions and ordinary failed outcomes: a refused kill(2)
	// happens inside the kernel and is not a fledge decision.
	for _, c := range cmds {
		assert.Equal(t, audit.Allow, f.decisionFor(c.command).Decision)
		f.outcomeFor(c.command)
	}
}
