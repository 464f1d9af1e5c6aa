// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// rootOnlyPlant is what TestRootOnlySystemFiles plants in a system path: a 0600 root file
// and a 0700 root directory holding a 0644 file, under innocuous random names.
type rootOnlyPlant struct {
	file, dir, inner, secret string
}

func plantRootOnly(t *testing.T, parent string) rootOnlyPlant {
	t.Helper()
	id := randomID()
	p := rootOnlyPlant{
		file:   filepath.Join(parent, "fledge-rt-"+id+".conf"),
		dir:    filepath.Join(parent, "fledge-rt-"+id+".d"),
		secret: "ROOTONLY-" + id,
	}
	p.inner = filepath.Join(p.dir, "inner.conf")
	require.NoError(t, os.WriteFile(p.file, []byte(p.secret+"-file\n"), 0o600))
	t.Cleanup(func() { _ = os.Remove(p.file) })
	require.NoError(t, os.Mkdir(p.dir, 0o700))
	t.Cleanup(func() { _ = os.RemoveAll(p.dir) })
	require.NoError(t, os.WriteFile(p.inner, []byte(p.secret+"-inner\n"), 0o644))
	// os.WriteFile/Mkdir obey the umask: set the modes for sure.
	require.NoError(t, os.Chmod(p.file, 0o600))
	require.NoError(t, os.Chmod(p.dir, 0o700))
	require.NoError(t, os.Chmod(p.inner, 0o644))
	return p
}

// TestRootOnlySystemFiles: as root, a confined command reads of /etc, /usr/local and /opt
// only what an ordinary user could. The planted files' names are random (no list of
// secret names can know them); an unconfined root reads them (positive control), a
// confined one gets neither the 0600 file nor anything of the 0700 directory, on every
// launch path (template copy, fresh view, stub), with the working directory in the system
// path too; /etc/passwd, /etc/hosts, sh, git and python3 still work.
func TestRootOnlySystemFiles(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "the owner-bits hole exists for a root fledge")
	var plants []rootOnlyPlant
	for _, parent := range []string{"/etc", "/usr/local", "/opt"} {
		if st, err := os.Stat(parent); err == nil && st.IsDir() {
			plants = append(plants, plantRootOnly(t, parent))
		}
	}
	require.NotEmpty(t, plants)
	// Positive control: the same reads succeed unconfined (root's owner bits).
	for _, p := range plants {
		out, err := exec.Command("cat", p.file, p.inner).CombinedOutput()
		require.NoError(t, err, "unconfined read of %s: %s", p.file, out)
		require.Contains(t, string(out), p.secret)
	}

	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"thread-template", Options{Launch: LaunchThread}},
		{"thread-fresh", Options{Launch: LaunchThread, DisableViewTemplate: true}},
		{"stub", Options{Launch: LaunchStub}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, tc.opts)
			require.True(t, sb.view && !sb.userView, "the root view")
			require.Equal(t, SystemFilesOthers, sb.Report().SystemFiles, "warnings: %v", sb.Report().Warnings)
			e := newEnv(t)
			for _, p := range plants {
				for _, attack := range []string{
					"cat " + p.file,
					"cat " + p.inner,
					"ls " + p.dir,
					"cd " + p.dir,
					"head -c 100 " + p.file + " " + p.inner,
					"python3 -c 'import sys; print(open(sys.argv[1]).read())' " + p.file,
				} {
					res, out, errOut := run(t, sb, e.spec(attack))
					assert.NotEqual(t, 0, res.ExitCode, "%s succeeded: %s", attack, out)
					assert.NotContains(t, out+errOut, p.secret, attack)
					if !strings.HasPrefix(attack, "cd ") { // dash does not say why
						assert.Contains(t, errOut, "ermission denied", attack)
					}
				}
			}
			// Still usable: world-readable files, programs.
			res, out, errOut := run(t, sb, e.spec(`grep -c root /etc/passwd && test -s /etc/hosts && git --version && python3 -c 'print("py", 6*7)' && sh -c 'echo sh ok' && stat -c %u:%g /etc/passwd`))
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			assert.Contains(t, out, "git version")
			assert.Contains(t, out, "py 42")
			assert.Contains(t, out, "sh ok")
			assert.Contains(t, out, "65534:65534", "root's files show as nobody's")

			// A working directory in a system path: its own mount is shown the same way.
			etc, err := os.Open(filepath.Dir(plants[0].file))
			require.NoError(t, err)
			defer etc.Close()
			spec := e.spec("cat ./" + filepath.Base(plants[0].file) + "; cat ./" + filepath.Base(plants[0].dir) + "/inner.conf; cat ./hosts ./passwd >/dev/null && echo readable")
			spec.Dir, spec.DirPath = etc, etc.Name()
			res, out, errOut = run(t, sb, spec)
			assert.NotContains(t, out+errOut, plants[0].secret)
			assert.Equal(t, 0, res.ExitCode, errOut)
			assert.Contains(t, out, "readable", errOut)
		})
	}
}

// TestRootOnlyProjectUnderSystemPath: a read-only grant beneath a system path that is not
// one itself (a project under /opt granted read-only) keeps root's files readable: the
// user granted it.
func TestRootOnlyProjectUnderSystemPath(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "root only")
	sb := newSandbox(t, Options{})
	require.Equal(t, SystemFilesOthers, sb.Report().SystemFiles)
	dir, err := os.MkdirTemp("/opt", "fledge-rt-proj-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	f := filepath.Join(dir, "src.go")
	require.NoError(t, os.WriteFile(f, []byte("package granted\n"), 0o600))
	e := newEnv(t)
	spec := e.spec("cat " + f)
	spec.Access.ReadOnly = append(spec.Access.ReadOnly, dir)
	res, out, errOut := run(t, sb, spec)
	assert.Equal(t, 0, res.ExitCode, errOut)
	assert.Equal(t, "package granted\n", out)
}

// rootOnlyDegraded: a sandbox whose system paths cannot be idmapped says so in every run.
func TestRootOnlyReport(t *testing.T) {
	sb := newSandbox(t, Options{})
	r := sb.Report()
	if os.Geteuid() != 0 || !sb.view || sb.userView {
		return
	}
	if sb.hideRootErr != nil {
		assert.Equal(t, SystemFilesByName, r.SystemFiles)
		assert.True(t, strings.Contains(strings.Join(r.Warnings, "\n"), "root-only files"))
		m, _ := sb.plan(&sandbox.Spec{})
		assert.Contains(t, strings.Join(m.Degraded, "\n"), "system paths")
		return
	}
	assert.Equal(t, SystemFilesOthers, r.SystemFiles)
}

// TestRootSupplementaryGroups: a root fledge in an extra group (a container's root in adm,
// disk, wheel) does not pass that group's bits on: a file readable only by the group is
// closed to its commands, even through a group the idmapping leaves as it is.
func TestRootSupplementaryGroups(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "root only")
	const gid = 4242
	groups, err := syscall.Getgroups()
	require.NoError(t, err)
	// The whole test process (every thread) joins the group, as a root in it would be.
	require.NoError(t, syscall.Setgroups(append(groups, gid)))
	t.Cleanup(func() { _ = syscall.Setgroups(groups) })
	f := filepath.Join("/etc", "fledge-rt-grp-"+randomID()+".conf")
	secret := "GROUPONLY-" + randomID()
	require.NoError(t, os.WriteFile(f, []byte(secret), 0o040))
	t.Cleanup(func() { _ = os.Remove(f) })
	require.NoError(t, os.Chown(f, 4243, gid))
	require.NoError(t, os.Chmod(f, 0o040))
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			res, out, errOut := run(t, sb, e.spec("id -G; cat "+f))
			assert.NotEqual(t, 0, res.ExitCode, out)
			assert.NotContains(t, out, secret)
			assert.Contains(t, errOut, "ermission denied")
			assert.NotContains(t, out, strconv.Itoa(gid), "the command is still in the group")
		})
	}
}

// BenchmarkHideRootNS is what New pays once per sandbox (as root with a view) for the
// idmapping: the stopped child, its namespace, and the probe of every system path.
func BenchmarkHideRootNS(b *testing.B) {
	for b.Loop() {
		fd, err := hideRootNS()
		if err != nil {
			b.Fatal(err)
		}
		syscall.Close(fd)
	}
}

// BenchmarkUnshareIPC is the launch thread's part of the IPC namespace: a throwaway thread
// with and without unshare(CLONE_NEWIPC) (the namespace is freed when the thread dies).
func BenchmarkUnshareIPC(b *testing.B) {
	for _, ipc := range []bool{false, true} {
		b.Run(map[bool]string{false: "thread-only", true: "unshare-ipc"}[ipc], func(b *testing.B) {
			var r0, r1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &r0)
			n := 0
			for b.Loop() {
				n++
				var err error
				onDiscardedThread(func() {
					if ipc {
						err = unix.Unshare(unix.CLONE_NEWIPC)
					}
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			// CPU of the process (the exited threads included), less sensitive than the
			// wall clock to a loaded machine.
			_ = unix.Getrusage(unix.RUSAGE_SELF, &r1)
			cpu := unix.TimevalToNsec(r1.Utime) + unix.TimevalToNsec(r1.Stime) - unix.TimevalToNsec(r0.Utime) - unix.TimevalToNsec(r0.Stime)
			b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/op")
		})
	}
}

// TestRootOnlyAndIPCDegraded: without the idmapping (a filesystem that cannot be idmapped,
// pretended here) or without an IPC namespace, doctor warns, a run is recorded degraded and
// strict refuses it.
func TestRootOnlyAndIPCDegraded(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "the root view")
	for _, tc := range []struct {
		opts         Options
		degraded     string
		reportSystem string
		reportIPC    string
	}{
		{Options{DisableSystemIDMap: true}, "system paths", SystemFilesByName, IPCPerRun},
		{Options{DisableIPCNS: true}, "IPC namespace", SystemFilesOthers, IPCNone},
	} {
		t.Run(tc.degraded, func(t *testing.T) {
			sb := newSandbox(t, tc.opts)
			r := sb.Report()
			assert.Equal(t, tc.reportSystem, r.SystemFiles)
			assert.Equal(t, tc.reportIPC, r.IPCNamespace)
			assert.NotEmpty(t, r.Warnings)
			e := newEnv(t)
			res, _, errOut := run(t, sb, e.spec("true"))
			require.Equal(t, 0, res.ExitCode, errOut)
			assert.Contains(t, strings.Join(res.Mode.Degraded, "\n"), tc.degraded)
			spec := e.spec("true")
			spec.Strict = true
			_, err := sb.Start(context.Background(), spec)
			require.ErrorIs(t, err, sandbox.ErrUnavailable)
			assert.Contains(t, err.Error(), tc.degraded)
		})
	}
}
