// SPDX-License-Identifier: MIT

package linux

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestPidfdPidAsFdinfo: the pid a launcher's pidfd answer is read as (one ioctl) is the
// child's, as its fdinfo says.
func TestPidfdPidAsFdinfo(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "10")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	pid, err := pidfdPid(fd)
	require.NoError(t, err)
	assert.Equal(t, cmd.Process.Pid, pid)
	fromInfo, err := pidfdPidFdinfo(fd)
	require.NoError(t, err)
	assert.Equal(t, cmd.Process.Pid, fromInfo)
}
