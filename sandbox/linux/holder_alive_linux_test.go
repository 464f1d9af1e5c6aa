// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestPidHolderAliveSeesExitBeforeReap: a holder that has exited but is not reaped yet (a
// zombie: signal 0 still succeeds) is not alive, through its pidfd alone. The holder here is
// a plain child with no reaper, so nothing but the pidfd can tell.
func TestPidHolderAliveSeesExitBeforeReap(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "60")
	require.NoError(t, cmd.Start())
	fd, err := unix.PidfdOpen(cmd.Process.Pid, unix.PIDFD_NONBLOCK)
	require.NoError(t, err)
	h := &pidHolder{proc: cmd.Process, sock: -1, nsFD: -1, procFD: -1, pidFD: fd}
	defer h.close()
	assert.True(t, h.alive(), "a running holder is alive")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool { return !h.alive() }, 10*time.Second, time.Millisecond, "the dead holder still looks alive")
	// Still unreaped: the old checks would have needed /proc to tell.
	assert.NoError(t, cmd.Process.Signal(syscall.Signal(0)), "the holder is a zombie, not reaped")
	_, err = os.Stat("/proc/" + strconv.Itoa(cmd.Process.Pid))
	assert.NoError(t, err)
	_ = cmd.Wait()
}
