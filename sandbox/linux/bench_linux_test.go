// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/sandbox"
)

// BenchmarkBareExecTrue is the baseline: os/exec of sh -c true.
func BenchmarkBareExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrue is Start+Wait of sh -c true, sandboxed with the defaults an exec gets
// (Landlock, a cgroup with memory and pids limits, private tmp), and with parts switched
// off to show what each costs.
func BenchmarkExecTrue(b *testing.B) {
	dir, err := os.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	for _, bc := range []struct {
		name string
		opts Options
		tmp  bool
	}{
		{"full", Options{}, true},
		{"thread", Options{DisableLauncher: true}, true},
		{"full-stub", Options{Launch: LaunchStub}, true},
		{"no-tmp", Options{}, false},
		{"fresh-view", Options{DisableViewTemplate: true}, true},
		{"no-pidns", Options{DisablePidNS: true}, true},
		{"no-ipcns", Options{DisableIPCNS: true}, true},
		{"no-ipcns-stub", Options{Launch: LaunchStub, DisableIPCNS: true}, true},
		{"no-idmap", Options{DisableSystemIDMap: true}, true},
		{"no-idmap-fresh-view", Options{DisableSystemIDMap: true, DisableViewTemplate: true}, true},
		{"no-view", Options{DisableView: true}, true},
		{"no-cgroup", Options{DisableCgroups: true}, false},
		{"no-landlock", Options{DisableLandlock: true}, false},
		{"stub-only", Options{DisableCgroups: true, DisableLandlock: true}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.opts.Launch == "" {
				bc.opts.Launch = LaunchThread
			}
			sb, err := New(bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sb.Close() })
			// KindExec: a command, which (unlike a plugin process) a session's launcher
			// takes from its fourth run on.
			spec := &sandbox.Spec{
				Kind: sandbox.KindExec, Name: "bench", Path: "/bin/sh", Args: []string{"sh", "-c", "true"},
				Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Network: true,
				Access:     sandbox.Access{ReadWrite: []string{dir.Name()}, ReadExec: SystemReadExec},
				Limits:     sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256},
				PrivateTmp: bc.tmp,
			}
			for b.Loop() {
				p, err := sb.Start(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				res, err := p.Wait()
				if err != nil || res.ExitCode != 0 {
					b.Fatal(err, res)
				}
			}
		})
	}
}

// BenchmarkExecAB measures what one part costs an exec by running the exec with it and
// without it in alternation (on a shared, loaded machine, rows run one after another
// compare different loads): ns/op is a pair; on-ns/op and off-ns/op are the halves.
func BenchmarkExecAB(b *testing.B) {
	dir, err := os.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	for _, bc := range []struct {
		name    string
		on, off Options
		// leave: the off sandbox's launch threads leave the run's groups (Sandbox.leaveForTest).
		leave bool
	}{
		// The launch thread exits in the run's v1 groups (on) or migrates out (off).
		{"thread-exit", Options{}, Options{}, true},
		{"ipcns-thread", Options{}, Options{DisableIPCNS: true}, false},
		{"ipcns-stub", Options{Launch: LaunchStub}, Options{Launch: LaunchStub, DisableIPCNS: true}, false},
		{"idmap-template", Options{}, Options{DisableSystemIDMap: true}, false},
		{"idmap-fresh-view", Options{DisableViewTemplate: true}, Options{DisableViewTemplate: true, DisableSystemIDMap: true}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var sbs [2]*Sandbox
			for i, o := range []Options{bc.on, bc.off} {
				if o.Launch == "" {
					o.Launch = LaunchThread
				}
				sb, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = sb.Close() })
				sb.leaveForTest = bc.leave && i == 1
				sbs[i] = sb
			}
			spec := &sandbox.Spec{
				Name: "bench", Path: "/bin/sh", Args: []string{"sh", "-c", "true"},
				Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Network: true,
				Access:     sandbox.Access{ReadWrite: []string{dir.Name()}, ReadExec: SystemReadExec},
				Limits:     sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256},
				PrivateTmp: true,
			}
			var spent [2]time.Duration
			n := 0
			for b.Loop() {
				for i, sb := range sbs {
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

// BenchmarkExecEgress is what a run's network by destination costs its start: "deny" an
// empty namespace, "egress" the session's namespace (thread: joined; stub: each run's stub
// builds its own and hands it over, as every unprivileged run does).
func BenchmarkExecEgress(b *testing.B) {
	dir, err := os.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	pol, err := egress.NewPolicy(false, []string{"localhost:1", "example.org:443"})
	if err != nil {
		b.Fatal(err)
	}
	for _, launch := range []string{LaunchThread, LaunchStub} {
		for _, withEgress := range []bool{false, true} {
			name := launch + "/deny"
			if withEgress {
				name = launch + "/egress"
			}
			b.Run(name, func(b *testing.B) {
				sb, err := New(Options{Launch: launch})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = sb.Close() })
				eg := egress.NewSession(pol, egress.Limits{})
				b.Cleanup(func() { _ = eg.Close() })
				spec := &sandbox.Spec{
					Name: "bench", Path: "/bin/sh", Args: []string{"sh", "-c", "true"},
					Dir: dir, Env: []string{"PATH=/usr/bin:/bin"},
					Access: sandbox.Access{ReadWrite: []string{dir.Name()}, ReadExec: SystemReadExec},
					Limits: sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256},
				}
				if withEgress {
					spec.Egress = eg
				}
				for b.Loop() {
					p, err := sb.Start(context.Background(), spec)
					if err != nil {
						b.Fatal(err)
					}
					res, err := p.Wait()
					if err != nil || res.ExitCode != 0 || len(res.Mode.Degraded) > 0 {
						b.Fatal(err, res)
					}
				}
			})
		}
	}
}

// BenchmarkExecParallel is BenchmarkExecTrue/full with eight execs at a time (the
// pipelined case), with the launch threads exiting in the run's groups (exit) or
// migrating out of them (leave, Sandbox.leaveForTest): every migration takes the kernel's
// global threadgroup lock for writing, which concurrent launches wait for.
func BenchmarkExecParallel(b *testing.B) {
	dir, err := os.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	for _, leave := range []bool{false, true} {
		name := "exit"
		if leave {
			name = "leave"
		}
		b.Run(name, func(b *testing.B) {
			sb, err := New(Options{Launch: LaunchThread})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sb.Close() })
			sb.leaveForTest = leave
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				spec := &sandbox.Spec{
					Name: "bench", Path: "/bin/sh", Args: []string{"sh", "-c", "true"},
					Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Network: true,
					Access:     sandbox.Access{ReadWrite: []string{dir.Name()}, ReadExec: SystemReadExec},
					Limits:     sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256},
					PrivateTmp: true,
				}
				for pb.Next() {
					p, err := sb.Start(context.Background(), spec)
					if err != nil {
						b.Error(err)
						return
					}
					res, err := p.Wait()
					if err != nil || res.ExitCode != 0 {
						b.Error(err, res)
						return
					}
				}
			})
		})
	}
}

// BenchmarkExecTrustBundle is what showing a trust bundle at the system CA bundle paths
// costs an exec, per way of building the view: runs with and without one alternate on one
// sandbox (each has its own template, and goes first in every other pair), ns/op is a
// pair, on-ns/op and off-ns/op its halves.
func BenchmarkExecTrustBundle(b *testing.B) {
	dir, err := os.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	bundle := filepath.Join(b.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, l := range viewLaunchers {
		b.Run(l.name, func(b *testing.B) {
			sb, err := New(l.opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sb.Close() })
			if !sb.view {
				b.Skip("no private filesystem view")
			}
			var spent [2]time.Duration
			n := 0
			for b.Loop() {
				// Each goes first in every other pair: the first of a pair meets the
				// previous pair's cleanup.
				for k := range 2 {
					i := (k + n) % 2
					tb := []string{bundle, ""}[i]
					spec := &sandbox.Spec{
						Name: "bench", Path: "/bin/sh", Args: []string{"sh", "-c", "true"},
						Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Network: true,
						Access:      sandbox.Access{ReadWrite: []string{dir.Name()}, ReadExec: SystemReadExec},
						Limits:      sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256},
						PrivateTmp:  true,
						TrustBundle: tb,
					}
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

// BenchmarkTrustFiles is the host's share of it: finding the system bundle paths on disk.
func BenchmarkTrustFiles(b *testing.B) {
	for b.Loop() {
		trustFiles("/tmp/ca.pem")
	}
}
