// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/sandbox"
)

// BenchmarkKernelRecordAB measures what recording kernel refusals costs an exec, and what
// trace mode costs, each against the same exec without it, in alternation (see
// BenchmarkExecAB): ns/op is a pair; on-ns/op and off-ns/op are the halves.
//
//   - record-true: sh -c true with the default recording (the listener's hand-over; a
//     run refused nothing sends nothing to it) vs none.
//   - trace-true: sh -c true traced (every path and connect call a round trip to the
//     host) vs the default recording.
//   - trace-gobuild: go build of a small module (fresh build cache each time, so the
//     compiler and linker run) traced vs the default recording.
func BenchmarkKernelRecordAB(b *testing.B) {
	work := b.TempDir()
	dir, err := os.Open(work)
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	goroot := "/usr/local/go"
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		goroot = strings.TrimSpace(string(out))
	}
	mod := filepath.Join(work, "mod")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		b.Fatal(err)
	}
	for name, body := range map[string]string{
		"go.mod":  "module example.com/small\n\ngo 1.22\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\nfunc main() { fmt.Println(strings.Repeat(\"x\", 3)) }\n",
	} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	sb, err := New(Options{Launch: LaunchThread})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sb.Close() })
	base := func(script string) *sandbox.Spec {
		return &sandbox.Spec{
			Name: "bench", Path: "/bin/sh", Args: []string{"sh", "-c", script},
			Dir: dir, Env: []string{"PATH=" + goroot + "/bin:/usr/bin:/bin", "HOME=" + work, "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "CGO_ENABLED=0"},
			Network:    true,
			Access:     sandbox.Access{ReadWrite: []string{work}, ReadExec: append([]string{goroot}, SystemReadExec...)},
			Limits:     sandbox.Limits{MemoryBytes: 2 << 30, Pids: 512},
			PrivateTmp: true,
		}
	}
	// As a session records them: the run's Landlock records are taken late, off its Wait.
	record := func(s *sandbox.Spec) *sandbox.Spec {
		s.KernelDenials = func(sandbox.KernelDenial) {}
		s.KernelDenialsLate = func(<-chan struct{}) {}
		return s
	}
	trace := func(s *sandbox.Spec) *sandbox.Spec { record(s).Trace = true; return s }
	build := "cd mod && GOCACHE=$TMPDIR/cache go build -o $TMPDIR/small . && $TMPDIR/small"
	for _, bc := range []struct {
		name    string
		on, off *sandbox.Spec
	}{
		{"record-true", record(base("true")), base("true")},
		{"trace-true", trace(base("true")), record(base("true"))},
		{"trace-gobuild", trace(base(build)), record(base(build))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := exec.LookPath(goroot + "/bin/go"); err != nil && bc.name == "trace-gobuild" {
				b.Skip("no go toolchain at " + goroot)
			}
			var spent [2]time.Duration
			n := 0
			for b.Loop() {
				for i, spec := range []*sandbox.Spec{bc.on, bc.off} {
					t0 := time.Now()
					p, err := sb.Start(context.Background(), spec)
					if err != nil {
						b.Fatal(err)
					}
					res, err := p.Wait()
					if err != nil || res.ExitCode != 0 {
						b.Fatal(err, res)
					}
					spent[i] += time.Since(t0)
				}
				n++
			}
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(n), "on-ns/op")
			b.ReportMetric(float64(spent[1].Nanoseconds())/float64(n), "off-ns/op")
		})
	}
}
