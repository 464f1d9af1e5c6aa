// SPDX-License-Identifier: MIT

package wasm_test

// Benchmarks behind the WASM rows of `make bench` (bench/run.sh), through the same session
// as the native figures (fledgev1.Run, real audit log, platform sandbox for execs). They
// only run under -bench.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/sandbox/wasm"
	"github.com/fledgehq/fledge/ui"
)

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

// startOnce runs one session of benchguest and returns the time from Run to the first
// output message; the runtime (and its compilation cache) is made fresh from wo.
func startOnce(b *testing.B, f *fixture, wo wasm.Options) time.Duration {
	w, err := wasm.New(wo)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	opts := f.opts
	u := &firstOutputUI{UI: opts.UI, first: make(chan time.Time, 1)}
	opts.UI = u
	opts.Args = []string{"hello"}
	opts.PluginSandbox = w
	t := time.Now()
	details, err := w.Describe(opts.Program)
	if err != nil {
		b.Fatal(err)
	}
	opts.PluginStartDetails = details
	done := make(chan error, 1)
	go func() {
		out, err := fledgev1.Run(context.Background(), opts)
		if err == nil && out.ExitCode != 0 {
			err = fmt.Errorf("exit code %d", out.ExitCode)
		}
		done <- err
	}()
	select {
	case first := <-u.first:
		if err := <-done; err != nil {
			b.Fatalf("session: %v\nstderr:\n%s", err, f.stderr.String())
		}
		return first.Sub(t)
	case err := <-done:
		b.Fatalf("session ended before the first message: %v\nstderr:\n%s", err, f.stderr.String())
		return 0
	}
}

func reportMedian(b *testing.B, times []int64, unit string) {
	var sum int64
	for _, t := range times {
		sum += t
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	b.ReportMetric(float64(sum/int64(len(times))), "ns/"+unit)
	b.ReportMetric(float64(sorted[len(sorted)/2]), "median-ns/"+unit)
}

// BenchmarkWasmColdStart: session start to the module's first output message. first-compile
// gives every start an empty compilation cache (what the first run of a newly installed
// plugin pays); cached reuses one warmed cache dir with nothing compiled in memory (every
// later run, each a new fledge process); long-lived starts a module this process already
// compiled, with a new wasm.Sandbox and Describe per start as each tool call through
// `fledge serve` makes them (fledgev1.WasmRuntime).
func BenchmarkWasmColdStart(b *testing.B) {
	f := newFixture(b, "benchguest", protocol.Capabilities{Filesystem: "none"})
	b.Run("first-compile", func(b *testing.B) {
		times := make([]int64, 0, b.N)
		i := 0
		for b.Loop() {
			wo := f.wopts
			wo.CacheDir = filepath.Join(b.TempDir(), strconv.Itoa(i))
			i++
			wasm.ForgetCompiled()
			times = append(times, int64(startOnce(b, f, wo)))
		}
		reportMedian(b, times, "start")
	})
	b.Run("cached", func(b *testing.B) {
		wo := f.wopts
		wo.CacheDir = b.TempDir()
		startOnce(b, f, wo) // warm the cache
		times := make([]int64, 0, b.N)
		cpu := processCPU()
		for b.Loop() {
			wasm.ForgetCompiled() // a new process: only the cache dir is warm
			times = append(times, int64(startOnce(b, f, wo)))
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(len(times)), "cpu-ns/run")
		reportMedian(b, times, "start")
	})
	b.Run("long-lived", func(b *testing.B) {
		wo := f.wopts
		wo.CacheDir = b.TempDir()
		wasm.ForgetCompiled()
		startOnce(b, f, wo) // the first call compiles
		before := wasm.CompileCount()
		times := make([]int64, 0, b.N)
		cpu := processCPU()
		for b.Loop() {
			times = append(times, int64(startOnce(b, f, wo)))
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(len(times)), "cpu-ns/run")
		if n := wasm.CompileCount() - before; n != 0 {
			b.Fatalf("%d compiles in a host that had the module compiled", n)
		}
		reportMedian(b, times, "start")
	})
}

// BenchmarkWasmExecRoundTrip: an exec of `true` from a WASM plugin (SDK Exec, over send and
// recv), through the session, the audit log and the platform sandbox, back to the module.
func BenchmarkWasmExecRoundTrip(b *testing.B) {
	f := newFixture(b, "benchguest", protocol.Capabilities{Exec: true, Filesystem: "none"})
	f.stdout.Reset()
	f.mustRun("exec", strconv.Itoa(b.N))
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	var rep struct {
		N      int   `json:"n"`
		Mean   int64 `json:"mean_ns"`
		Median int64 `json:"median_ns"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil || rep.N != b.N {
		b.Fatalf("plugin report %q: %v", lines[len(lines)-1], err)
	}
	b.ReportMetric(float64(rep.Mean), "ns/exec")
	b.ReportMetric(float64(rep.Median), "median-ns/exec")
}
