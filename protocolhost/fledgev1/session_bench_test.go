// SPDX-License-Identifier: MIT

package fledgev1

// Benchmarks behind `make bench` (bench/run.sh). They need the bench plugin (bench/plugin):
// FLEDGE_BENCH_PLUGIN names a built one, otherwise each benchmark builds it with the go
// command. They only run under -bench, never in `go test ./...`.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/ui"
)

// benchPlugin returns the path of a built bench plugin.
func benchPlugin(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("FLEDGE_BENCH_PLUGIN"); p != "" {
		return p
	}
	out := filepath.Join(b.TempDir(), "fledge-bench")
	cmd := exec.Command("go", "build", "-o", out, "../../bench/plugin")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the bench plugin (set FLEDGE_BENCH_PLUGIN to skip this): %v\n%s", err, msg)
	}
	return out
}

// firstOutputUI records when the first output message arrives (the cold-start probe).
type firstOutputUI struct {
	ui.UI
	once  sync.Once
	first chan time.Time
}

func (u *firstOutputUI) Output(text string) {
	u.once.Do(func() { u.first <- time.Now() })
	u.UI.Output(text)
}

type benchEnv struct {
	auditPath string
	opts      Options
	stdout    *syncBuffer
	stderr    *syncBuffer
}

// newBenchEnv lays out a throwaway home, config dir, project and installed plugin the way
// cmd/fledge does (the same policy calls newFixture makes), with the bench plugin granted
// exec and the audit log under the given fsync policy.
func newBenchEnv(b *testing.B, pluginBin string, fsync audit.FsyncPolicy) *benchEnv {
	b.Helper()
	root := b.TempDir()
	home := filepath.Join(root, "home")
	configDir := filepath.Join(home, ".config", "fledge")
	stateDir := filepath.Join(home, ".local", "state", "fledge")
	proj := filepath.Join(root, "work", "proj")
	pluginDir := filepath.Join(configDir, "plugins", "fledge-bench")
	dataDir := filepath.Join(pluginDir, "data")
	auditPath := filepath.Join(stateDir, "audit.jsonl")
	for _, d := range []string{home, proj, dataDir, stateDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	src, err := os.ReadFile(pluginBin)
	if err != nil {
		b.Fatal(err)
	}
	program := filepath.Join(pluginDir, "fledge-bench")
	if err := os.WriteFile(program, src, 0o755); err != nil {
		b.Fatal(err)
	}
	sb, err := platform.New(platform.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if c, ok := sb.(io.Closer); ok {
		b.Cleanup(func() { _ = c.Close() })
	}
	log, err := audit.Open(auditPath, audit.Options{Fsync: fsync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = log.Close() })

	grants := protocol.Capabilities{Exec: true, Metadata: true}
	cfg := policy.Default()
	g := policy.Grants{Exec: true, Metadata: true}
	paths := policy.Paths{
		ProjectRoot: proj, PluginDir: pluginDir, PluginDataDir: dataDir,
		ConfigDir: configDir, StateDir: stateDir, AuditLog: auditPath,
		UserPATH: []string{"/usr/local/bin", "/usr/bin", "/bin"}, Home: home,
	}
	environ := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8"}
	e := &benchEnv{auditPath: auditPath, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	e.opts = Options{
		SessionID:     "bench",
		FledgeVersion: "bench",
		Plugin:        PluginMeta{Name: "fledge-bench", Version: "0.1.0", Dir: pluginDir, DataDir: dataDir, Source: "bench"},
		Command:       "fledge-bench",
		Program:       program,
		Grants:        grants,
		UI:            ui.New(ui.Options{Out: e.stdout, Err: e.stderr, NonInteractive: true}),
		Sandbox:       sb,
		Audit:         log,
		Stderr:        e.stderr,
		PluginSpec: sandbox.Spec{
			Env:        policy.ChildEnv(environ, nil, map[string]string{"FLEDGE_PLUGIN": "fledge-bench"}),
			Access:     policy.PluginAccess(paths, g, cfg),
			Limits:     cfg.PluginLimits(),
			PrivateTmp: true,
		},
		PluginCwd: dataDir,
		ExecSpec: sandbox.Spec{
			Env:     policy.ChildEnv(environ, nil, nil),
			Access:  policy.ExecAccess(paths, cfg),
			Network: true,
			Limits:  cfg.ExecLimits(),
		},
		ExecRoots: []string{proj, pluginDir},
	}
	return e
}

// run runs one session and decodes the plugin's last output line (its report) into v.
func (e *benchEnv) run(b *testing.B, v any, args ...string) {
	b.Helper()
	e.stdout.Reset()
	opts := e.opts
	opts.Args = args
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := Run(ctx, opts)
	if err != nil || out.ExitCode != 0 {
		b.Fatalf("session %v: err %v, outcome %+v\nstderr:\n%s", args, err, out, e.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(e.stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		b.Fatalf("plugin report: %v\nstdout:\n%s\nstderr:\n%s", err, e.stdout.String(), e.stderr.String())
	}
}

type execReport struct {
	N      int   `json:"n"`
	Total  int64 `json:"total_ns"`
	Mean   int64 `json:"mean_ns"`
	Median int64 `json:"median_ns"`
}

// BenchmarkExecRoundTrip: an exec of `true` from a plugin, through the session, the audit
// log (decision fsynced before the command starts) and the sandbox, back to the plugin,
// against the baselines: os/exec of `sh -c true` from this process, and minimal bubblewrap
// and firejail invocations where installed. Every case reports ns/exec (its mean) and
// median-ns/exec.
func BenchmarkExecRoundTrip(b *testing.B) {
	bin := benchPlugin(b)
	cmdCase := func(argv ...string) func(b *testing.B) {
		return func(b *testing.B) {
			if _, err := exec.LookPath(argv[0]); err != nil {
				b.Skipf("%s is not installed", argv[0])
			}
			if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				b.Skipf("%s does not work here: %v: %s", argv[0], err, out)
			}
			times := make([]int64, 0, b.N)
			for b.Loop() {
				t := time.Now()
				if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
					b.Fatalf("%v: %v: %s", argv, err, out)
				}
				times = append(times, int64(time.Since(t)))
			}
			reportTimes(b, times)
		}
	}
	b.Run("bare", cmdCase("/bin/sh", "-c", "true"))
	// The floor under every exec round trip: a request the host answers from memory with one
	// (not synced) record, through the same pipes, SDK and read loop.
	b.Run("request", func(b *testing.B) {
		e := newBenchEnv(b, bin, audit.FsyncDurable)
		var rep execReport
		e.run(b, &rep, "meta", strconv.Itoa(b.N))
		if rep.N != b.N {
			b.Fatalf("plugin made %d requests, want %d", rep.N, b.N)
		}
		b.ReportMetric(float64(rep.Median), "median-ns/exec")
	})
	b.Run("bwrap", cmdCase("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--tmpfs", "/tmp", "--unshare-pid", "--new-session", "--die-with-parent", "/bin/sh", "-c", "true"))
	b.Run("firejail", cmdCase("firejail", "--quiet", "--noprofile", "/bin/sh", "-c", "true"))
	for _, c := range []struct {
		name  string
		fsync audit.FsyncPolicy
	}{{"fledge", audit.FsyncDurable}, {"fledge-fsync-never", audit.FsyncNever}} {
		b.Run(c.name, func(b *testing.B) {
			e := newBenchEnv(b, bin, c.fsync)
			var rep execReport
			e.run(b, &rep, "exec", strconv.Itoa(b.N))
			if rep.N != b.N {
				b.Fatalf("plugin ran %d execs, want %d", rep.N, b.N)
			}
			b.ReportMetric(float64(rep.Mean), "ns/exec")
			b.ReportMetric(float64(rep.Median), "median-ns/exec")
		})
	}
}

func reportTimes(b *testing.B, times []int64) {
	if len(times) == 0 {
		return
	}
	var sum int64
	for _, t := range times {
		sum += t
	}
	sorted := append([]int64(nil), times...)
	slices.Sort(sorted)
	b.ReportMetric(float64(sum/int64(len(times))), "ns/exec")
	b.ReportMetric(float64(sorted[len(sorted)/2]), "median-ns/exec")
}

// BenchmarkExecPipeline: 64 execs of `true` sent at once by one plugin vs the same 64 one
// after another (in the same session). Reports both totals and pipelined/sequential.
func BenchmarkExecPipeline(b *testing.B) {
	e := newBenchEnv(b, benchPlugin(b), audit.FsyncDurable)
	var piped, seq int64
	for b.Loop() {
		var rep struct {
			Pipelined  int64 `json:"pipelined_ns"`
			Sequential int64 `json:"sequential_ns"`
		}
		e.run(b, &rep, "pipeline", "64")
		piped += rep.Pipelined
		seq += rep.Sequential
	}
	b.ReportMetric(float64(piped)/float64(b.N), "pipelined-ns")
	b.ReportMetric(float64(seq)/float64(b.N), "sequential-ns")
	b.ReportMetric(float64(piped)/float64(seq), "ratio")
}

// BenchmarkColdStart: spawn to first message received, for the plugin started confined by a
// session (Run to the first output message) and unconfined (os/exec of the same binary with
// pipes, to its first line). Reports ns/start (mean) and median-ns/start.
func BenchmarkColdStart(b *testing.B) {
	bin := benchPlugin(b)
	b.Run("unconfined", func(b *testing.B) {
		times := make([]int64, 0, b.N)
		for b.Loop() {
			cmd := exec.Command(bin, "hello")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				b.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			t := time.Now()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
				b.Fatal(err)
			}
			times = append(times, int64(time.Since(t)))
			stdin.Close()
			_, _ = io.Copy(io.Discard, stdout)
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		reportStarts(b, times)
	})
	b.Run("confined", func(b *testing.B) {
		e := newBenchEnv(b, bin, audit.FsyncDurable)
		times := make([]int64, 0, b.N)
		for b.Loop() {
			u := &firstOutputUI{UI: e.opts.UI, first: make(chan time.Time, 1)}
			opts := e.opts
			opts.UI = u
			opts.Args = []string{"hello"}
			t := time.Now()
			done := make(chan error, 1)
			go func() {
				out, err := Run(context.Background(), opts)
				if err == nil && out.ExitCode != 0 {
					err = fmt.Errorf("exit code %d", out.ExitCode)
				}
				done <- err
			}()
			select {
			case first := <-u.first:
				times = append(times, int64(first.Sub(t)))
				if err := <-done; err != nil {
					b.Fatalf("session: %v\nstderr:\n%s", err, e.stderr.String())
				}
			case err := <-done:
				b.Fatalf("session ended before the first message: %v\nstderr:\n%s", err, e.stderr.String())
			}
		}
		reportStarts(b, times)
	})
}

func reportStarts(b *testing.B, times []int64) {
	var sum int64
	for _, t := range times {
		sum += t
	}
	sorted := append([]int64(nil), times...)
	slices.Sort(sorted)
	b.ReportMetric(float64(sum/int64(len(times))), "ns/start")
	b.ReportMetric(float64(sorted[len(sorted)/2]), "median-ns/start")
}
