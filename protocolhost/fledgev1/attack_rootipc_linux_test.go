// SPDX-License-Identifier: MIT

package fledgev1

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Root-only files and SysV IPC, attacked by a real plugin of a root fledge: the
// plugin process itself (attack_rootipc.py, granted nothing) and the commands a plugin asks
// for (scripted.py exec requests). The planted files have random names, so no list of
// secret names covers them; the IPC objects are the host's, 0600, of the same uid.

type rootIPCPlant struct {
	file, dir, inner, secret string
	shmID, msqID             int
}

func plantRootIPC(t *testing.T) rootIPCPlant {
	t.Helper()
	id := uniq(t)
	p := rootIPCPlant{
		file:   filepath.Join("/etc", "fledge-rt-"+id+".conf"),
		dir:    filepath.Join("/usr/local", "fledge-rt-"+id+".d"),
		secret: "ROOTIPC-" + id,
	}
	p.inner = filepath.Join(p.dir, "inner.conf")
	require.NoError(t, os.WriteFile(p.file, []byte(p.secret+"\n"), 0o600))
	t.Cleanup(func() { _ = os.Remove(p.file) })
	require.NoError(t, os.Mkdir(p.dir, 0o700))
	t.Cleanup(func() { _ = os.RemoveAll(p.dir) })
	require.NoError(t, os.WriteFile(p.inner, []byte(p.secret+"\n"), 0o644))
	for path, mode := range map[string]os.FileMode{p.file: 0o600, p.dir: 0o700, p.inner: 0o644} {
		require.NoError(t, os.Chmod(path, mode))
	}
	var err error
	p.shmID, err = unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(p.shmID, unix.IPC_RMID, nil) })
	seg, err := unix.SysvShmAttach(p.shmID, 0, 0)
	require.NoError(t, err)
	copy(seg, p.secret)
	require.NoError(t, unix.SysvShmDetach(seg))
	q, _, errno := unix.Syscall(unix.SYS_MSGGET, unix.IPC_PRIVATE, unix.IPC_CREAT|0o600, 0)
	require.Zero(t, errno)
	p.msqID = int(q)
	t.Cleanup(func() { _, _, _ = unix.Syscall(unix.SYS_MSGCTL, q, unix.IPC_RMID, 0) })
	buf := make([]byte, 8+len(p.secret))
	binary.NativeEndian.PutUint64(buf, 1)
	copy(buf[8:], p.secret)
	_, _, errno = unix.Syscall6(unix.SYS_MSGSND, q, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(p.secret)), unix.IPC_NOWAIT, 0, 0)
	require.Zero(t, errno)
	return p
}

// shmExists: the host has a segment with key k.
func shmExists(k int) bool {
	id, err := unix.SysvShmGet(k, 0, 0)
	if err == nil {
		_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	}
	return err == nil
}

func TestAttackRootOnlyAndIPCFromPlugin(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "the owner-bits hole and the shared IPC are a root fledge's")
	p := plantRootIPC(t)
	key := int(binary.NativeEndian.Uint32([]byte(uniq(t)[:4]))&0x3fffffff) + 1
	t.Cleanup(func() { shmExists(key) })

	// Positive control: the same python3 reads, unconfined, succeed as root.
	ctl := exec.Command("python3", "-c", `import sys; print(open(sys.argv[1]).read() + open(sys.argv[2]).read())`, p.file, p.inner)
	b, err := ctl.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Contains(t, string(b), p.secret)

	f := newFixture(t, "attack_rootipc.py", protocol.Capabilities{Filesystem: "none"})
	out := f.run("file="+p.file, "inner="+p.inner, "dir="+p.dir,
		"shm="+strconv.Itoa(p.shmID), "msq="+strconv.Itoa(p.msqID), "key="+strconv.Itoa(key))
	assert.Equal(t, 0, out.ExitCode, "stderr:\n%s", f.stderr.String())
	rep := parseSelfReport(t, f.stdout.String())
	require.True(t, rep.done, "the plugin did not finish:\n%s\nstderr:\n%s", f.stdout.String(), f.stderr.String())
	want := map[string]string{
		"read_file": "denied", "read_inner": "denied", "list_dir": "denied", "sub_cat": "denied",
		"shm_read": "denied", "msg_read": "denied",
		// Its own IPC works, ordinary files and programs too.
		"shm_create": "ok", "read_hosts": "ok", "tools": "ok",
	}
	for name, v := range want {
		assert.Equal(t, v, rep.results[name], "%s: %s", name, rep.lines[name])
	}
	assert.Contains(t, rep.lines["tools"], "git version")
	assert.NotContains(t, f.stdout.String()+f.stderr.String(), p.secret)
	assert.False(t, shmExists(key), "the plugin's segment outlived it on the host")

	// The host's message is still queued: nothing inside consumed it.
	var st [256]byte
	_, _, errno := unix.Syscall(unix.SYS_MSGCTL, uintptr(p.msqID), unix.IPC_STAT, uintptr(unsafe.Pointer(&st[0])))
	require.Zero(t, errno)

	// The commands the plugin asks for: same files, and the IPC tables of their namespace.
	g := newFixture(t, "scripted.py", execGrant)
	cmds := []attackExec{
		{"cat_file", "cat " + p.file},
		{"cat_inner", "cat " + p.inner},
		{"ls_dir", "ls " + p.dir},
	}
	ipcs := attackExec{"ipcs", "cat /proc/sysvipc/shm /proc/sysvipc/msg"}
	_, srep := g.runScript(execSteps(append(append([]attackExec{}, cmds...), ipcs), 0)...)
	for _, c := range cmds {
		v := g.execValue(srep, c.id)
		assert.NotEqualValues(t, 0, v["code"], "%s: %v", c.command, v)
		assert.NotContains(t, v["stdout"], p.secret)
		assert.Contains(t, v["stderr"], "ermission denied", c.command)
	}
	v := g.execValue(srep, ipcs.id)
	assert.EqualValues(t, 0, v["code"], "%v", v)
	for _, line := range strings.Split(v["stdout"].(string), "\n")[1:] {
		fields := strings.Fields(line)
		if len(fields) > 1 && fields[0] != "key" {
			assert.NotContains(t, []string{strconv.Itoa(p.shmID), strconv.Itoa(p.msqID)}, fields[1], "the host's object is listed: %s", line)
		}
	}
	g.assertAlive(srep)
}
