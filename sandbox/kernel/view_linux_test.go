// SPDX-License-Identifier: MIT

package kernel

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkEnterView is the cost of building a typical exec's view on a launch thread
// (the system paths, /etc, /proc, the /dev nodes, a writable project and private tmp). It
// also reports the thread's own CPU time per view (cpu-ns/op), which a loaded machine does
// not inflate; the namespace's teardown, after the thread exits, is not included.
func BenchmarkEnterView(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	project, tmp := b.TempDir(), b.TempDir()
	v := &View{Mounts: []ViewMount{{Path: project, Writable: true}, {Path: tmp, Writable: true}, {Path: "/dev/null", Writable: true}}}
	for _, p := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/etc", "/proc", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"} {
		v.Mounts = append(v.Mounts, ViewMount{Path: p})
	}
	var err error
	if v.ProcMask, err = RootOnlyProc(); err != nil {
		b.Fatal(err)
	}
	var cpu int64
	for b.Loop() {
		var err error
		var used int64
		onThrowawayThread(b, func() {
			var r0, r1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_THREAD, &r0)
			err = EnterView(v, -1)
			_ = unix.Getrusage(unix.RUSAGE_THREAD, &r1)
			used = (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
		})
		if err != nil {
			b.Fatal(err)
		}
		cpu += used
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkEnterTemplate is BenchmarkEnterView's view entered as a copy of a template
// (built once): what a session's runs after its first pay for their view.
func BenchmarkEnterTemplate(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	project := b.TempDir()
	tmp, err := os.MkdirTemp("/tmp", "fledge-tmp-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(tmp) })
	v := &View{Mounts: []ViewMount{{Path: project, Writable: true}, {Path: tmp, Writable: true}, {Path: "/dev/null", Writable: true}}, RunTmp: tmp}
	for _, p := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/etc", "/proc", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"} {
		v.Mounts = append(v.Mounts, ViewMount{Path: p})
	}
	var tmpl *Template
	onThrowawayThread(b, func() { tmpl, err = BuildTemplate(v) })
	if err != nil {
		b.Fatal(err)
	}
	defer tmpl.Close()
	var cpu int64
	for b.Loop() {
		var used int64
		onThrowawayThread(b, func() {
			var r0, r1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_THREAD, &r0)
			err = EnterTemplate(tmpl, v, -1)
			_ = unix.Getrusage(unix.RUSAGE_THREAD, &r1)
			used = (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := tmpl.RemoveRunTmp(tmp); err != nil {
			b.Fatal(err)
		}
		cpu += used
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// The protection is mounted parents first, read-only winning over writable over a pin for
// one path; a path's rights are those of the deepest entry at or above it; a writable
// re-bind never widens a read-only grant.
func TestProtectOrder(t *testing.T) {
	v := &View{
		Mounts:    []ViewMount{{Path: "/r", Writable: true}, {Path: "/r/.git/modules/ro"}},
		Pin:       []string{"/r/.git", "/r/.git/modules", "/r/.git/modules/sub"},
		Protected: []string{"/r/.git/modules", "/r/.git/modules/sub/config", "/r/.git/config"},
		Writable:  []string{"/r/.git/modules/sub", "/r/.git/modules/ro/x"},
	}
	var got []string
	for _, e := range protectOrder(v) {
		got = append(got, string(e.kind)+" "+e.path)
	}
	want := []string{"pin /r/.git", "protect /r/.git/config", "protect /r/.git/modules",
		"writable /r/.git/modules/ro/x", "writable /r/.git/modules/sub", "protect /r/.git/modules/sub/config"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("protectOrder:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for p, ro := range map[string]bool{"/r": false, "/r/.git": false, "/r/.git/modules": true,
		"/r/.git/modules/a/b": true, "/r/.git/modules/sub": false, "/r/.git/modules/sub/objects": false,
		"/r/.git/modules/sub/config": true} {
		if readOnlyAt(v, p) != ro {
			t.Errorf("readOnlyAt(%s) = %v, want %v", p, !ro, ro)
		}
	}
	for p, w := range map[string]bool{"/r/.git/modules/sub": true, "/r/.git/modules/ro/x": false, "/elsewhere": false} {
		if grantedWritable(v, p) != w {
			t.Errorf("grantedWritable(%s) = %v, want %v", p, !w, w)
		}
	}
}

// BenchmarkEnterViewTrustBundle is BenchmarkEnterView's view without ("off") and with
// ("on") a file shown at the system CA bundle path, as a run given a trust bundle has it:
// cpu-ns/op is the launch thread's own CPU time per view.
func BenchmarkEnterViewTrustBundle(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	const target = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(target); err != nil {
		b.Skip("no " + target)
	}
	bundle := b.TempDir() + "/ca.pem"
	if err := os.WriteFile(bundle, []byte("bundle\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	project, tmp := b.TempDir(), b.TempDir()
	mounts := []ViewMount{{Path: project, Writable: true}, {Path: tmp, Writable: true}, {Path: "/dev/null", Writable: true}}
	for _, p := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/etc", "/proc", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"} {
		mounts = append(mounts, ViewMount{Path: p})
	}
	mask, err := RootOnlyProc()
	if err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		name := "off"
		v := &View{Mounts: mounts, ProcMask: mask}
		if on {
			name = "on"
			v.Files = []ViewFile{{Path: target, Source: bundle}}
		}
		b.Run(name, func(b *testing.B) {
			var cpu int64
			for b.Loop() {
				var err error
				var used int64
				onThrowawayThread(b, func() {
					var r0, r1 unix.Rusage
					_ = unix.Getrusage(unix.RUSAGE_THREAD, &r0)
					err = EnterView(v, -1)
					_ = unix.Getrusage(unix.RUSAGE_THREAD, &r1)
					used = (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
				})
				if err != nil {
					b.Fatal(err)
				}
				cpu += used
			}
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
