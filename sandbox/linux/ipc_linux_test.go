// SPDX-License-Identifier: MIT

package linux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// SysV message queues have no wrapper in x/sys/unix: raw syscalls.
func msgget(key, flags int) (int, error) {
	id, _, errno := unix.Syscall(unix.SYS_MSGGET, uintptr(key), uintptr(flags), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(id), nil
}

func msgsnd(id int, text string) error {
	buf := make([]byte, 8+len(text))
	binary.NativeEndian.PutUint64(buf, 1) // mtype
	copy(buf[8:], text)
	_, _, errno := unix.Syscall6(unix.SYS_MSGSND, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(text)), unix.IPC_NOWAIT, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func msgrcv(id int) (string, error) {
	buf := make([]byte, 8+256)
	n, _, errno := unix.Syscall6(unix.SYS_MSGRCV, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), 256, 0, unix.IPC_NOWAIT, 0)
	if errno != 0 {
		return "", errno
	}
	return string(buf[8 : 8+n]), nil
}

func msgrm(id int) {
	_, _, _ = unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
}

// runIPCHelper is the attack program of TestIPCNamespace: it reads the host's segment and
// queue by id, then makes a segment and a queue of its own with key.
func runIPCHelper(shm, msq, key string) int {
	shmID, _ := strconv.Atoi(shm)
	msqID, _ := strconv.Atoi(msq)
	k, _ := strconv.Atoi(key)
	if b, err := unix.SysvShmAttach(shmID, 0, unix.SHM_RDONLY); err != nil {
		fmt.Println("shm denied:", err)
	} else {
		fmt.Printf("shm=%s\n", b[:32])
		_ = unix.SysvShmDetach(b)
	}
	if text, err := msgrcv(msqID); err != nil {
		fmt.Println("msg denied:", err)
	} else {
		fmt.Printf("msg=%s\n", text)
	}
	id, err := unix.SysvShmGet(k, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	if err != nil {
		fmt.Println("create shm failed:", err)
		return 3
	}
	q, err := msgget(k, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	if err != nil {
		fmt.Println("create msg failed:", err)
		return 3
	}
	fmt.Printf("created shm %d msg %d\n", id, q)
	return 0
}

// TestIPCNamespace: the host makes a 0600 shared-memory segment and message queue (its
// own, as the same uid a root fledge's commands run as); a confined command attaches and
// reads them by id, which works unconfined (positive control) and fails in its own IPC
// namespace, on every launch path. What the command makes is gone after the run.
func TestIPCNamespace(t *testing.T) {
	testutil.RequireContained(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	secret := "IPCSECRET-" + randomID()

	shmID, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(shmID, unix.IPC_RMID, nil) })
	seg, err := unix.SysvShmAttach(shmID, 0, 0)
	require.NoError(t, err)
	copy(seg, secret)
	require.NoError(t, unix.SysvShmDetach(seg))
	msqID, err := msgget(unix.IPC_PRIVATE, unix.IPC_CREAT|0o600)
	require.NoError(t, err)
	t.Cleanup(func() { msgrm(msqID) })

	newKey := func(t *testing.T) int {
		k := int(rand.Int32N(1<<30)) + 1
		t.Cleanup(func() {
			if id, err := unix.SysvShmGet(k, 0, 0); err == nil {
				_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
			}
			if id, err := msgget(k, 0); err == nil {
				msgrm(id)
			}
		})
		return k
	}
	args := func(k int) []string { return []string{exe, strconv.Itoa(shmID), strconv.Itoa(msqID), strconv.Itoa(k)} }
	exists := func(k int) (shm, msg bool) {
		_, errS := unix.SysvShmGet(k, 0, 0)
		_, errM := msgget(k, 0)
		return errS == nil, errM == nil
	}

	// Positive control: unconfined, the same program reads both and leaves its objects.
	require.NoError(t, msgsnd(msqID, secret))
	k := newKey(t)
	cmd := exec.Command(exe, args(k)[1:]...)
	cmd.Env = []string{helperEnv + "=ipc"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "shm="+secret)
	require.Contains(t, string(out), "msg="+secret)
	shm, msg := exists(k)
	require.True(t, shm && msg, "unconfined, what the program made stays: %s", out)

	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"thread", Options{Launch: LaunchThread}},
		{"stub", Options{Launch: LaunchStub}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, tc.opts)
			require.Equal(t, IPCPerRun, sb.Report().IPCNamespace)
			require.NoError(t, msgsnd(msqID, secret))
			k := newKey(t)
			e := newEnv(t)
			spec := e.spec("true")
			spec.Path, spec.Args = exe, args(k)
			spec.Env = []string{helperEnv + "=ipc"}
			spec.Access.ReadExec = append([]string{filepath.Dir(exe)}, SystemReadExec...)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			assert.NotContains(t, out+errOut, secret)
			assert.Contains(t, out, "shm denied")
			assert.Contains(t, out, "msg denied")
			assert.Contains(t, out, "created shm", "IPC works inside the run")
			shm, msg := exists(k)
			assert.False(t, shm, "the run's segment outlived it on the host")
			assert.False(t, msg, "the run's queue outlived it on the host")
			// The host's message is still there: nothing inside consumed it.
			text, err := msgrcv(msqID)
			assert.NoError(t, err)
			assert.Equal(t, secret, text)
		})
	}
}

// TestMqueueGrantedIsOwn: a grant of /dev/mqueue shows the run's own POSIX message
// queues' filesystem, not the host's. (Landlock's rule for the path names the host's
// mqueue, so the run's own is not even listable: mq_open, which needs no path, is how a
// program uses queues.)
func TestMqueueGrantedIsOwn(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "mounts /dev/mqueue in the harness")
	dir := "/dev/mqueue"
	if err := os.Mkdir(dir, 0o1777); err == nil {
		// /dev is the host's devtmpfs: the directory would stay.
		t.Cleanup(func() { _ = os.Remove(dir) })
	} else if !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	if st.Type != mqueueMagic {
		// In the harness's own mount namespace: the host's /dev/mqueue is not touched.
		require.NoError(t, unix.Mount("mqueue", dir, "mqueue", 0, ""))
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	}
	name := "fledge-mq-" + randomID()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o600) // a queue
	require.NoError(t, err)
	require.NoError(t, f.Close())
	t.Cleanup(func() { _ = os.Remove(filepath.Join(dir, name)) })
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	spec := e.spec("ls -a /dev/mqueue; touch /dev/mqueue/inside-" + name + "; echo done")
	spec.Access.ReadWrite = append(spec.Access.ReadWrite, dir)
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Contains(t, out, "done")
	assert.NotContains(t, out, name, "the host's queue is visible")
	assert.NoFileExists(t, filepath.Join(dir, "inside-"+name), "the run's queue reached the host")
}

// mqueueMagic is the mqueue filesystem's f_type (linux/magic.h; not in x/sys/unix).
const mqueueMagic = 0x19800202
