// SPDX-License-Identifier: MIT

package audit

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writerCmd is this test binary re-executed as a writer process (see TestMain).
func writerCmd(t *testing.T, path string, count int, extra ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envWriter+"="+path, envCount+"="+strconv.Itoa(count))
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestMultiProcessOneChain(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns writer processes")
	}
	tests := []struct {
		name   string
		rotate string
		fsync  string
	}{
		{"one file", "-1", "durable"},
		{"rotating", "16384", "never"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			const procs, each = 4, 200
			var cmds []*exec.Cmd
			var starts []io.WriteCloser
			for range procs {
				cmd := writerCmd(t, path, each, envRotate+"="+tc.rotate, envFsync+"="+tc.fsync, envBarrier+"=1")
				in, err := cmd.StdinPipe()
				require.NoError(t, err)
				require.NoError(t, cmd.Start())
				cmds, starts = append(cmds, cmd), append(starts, in)
			}
			for _, in := range starts { // release all writers at once
				in.Close()
			}
			for _, cmd := range cmds {
				require.NoError(t, cmd.Wait())
			}

			rep, err := Verify(path)
			require.NoError(t, err)
			require.True(t, rep.OK, "%v", rep.Break)
			assert.Equal(t, procs*each, rep.Records)
			perPID := map[int]int{}
			var seq uint64
			switches := 0
			lastPID := 0
			require.NoError(t, Read(path, func(r *Record) error {
				seq++
				assert.Equal(t, seq, r.Seq)
				perPID[r.PID]++
				if r.PID != lastPID {
					switches++
					lastPID = r.PID
				}
				return nil
			}))
			assert.Len(t, perPID, procs)
			for pid, n := range perPID {
				assert.Equal(t, each, n, "pid %d", pid)
			}
			if tc.rotate != "-1" {
				assert.Greater(t, len(rep.Files), 2, "rotation happened")
			}
			t.Logf("%d files, writer switched %d times", len(rep.Files), switches)
		})
	}
}

func TestKill9UnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns writer processes")
	}
	path := testPath(t)
	cmd := writerCmd(t, path, 0, envFsync+"=never", envDetailBytes+"=20000", envRotate+"=-1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ready := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(out).ReadString('\n')
		ready <- err
	}()
	select {
	case err := <-ready:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("writer did not start within 60s")
	}
	// Let it get well into the stream: wait until the log holds 2 MiB.
	deadline := time.Now().Add(60 * time.Second)
	for {
		fi, err := os.Stat(path)
		if err == nil && fi.Size() > 2<<20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("writer wrote too little within 60s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)

	rep, err := Verify(path)
	require.NoError(t, err)
	if !rep.OK {
		// The only acceptable damage is the record that was being written.
		require.Equal(t, BreakTornTail, rep.Break.Kind, rep.Break.String())
	}
	require.Greater(t, rep.Records, 50)
	before := rep.Records

	l := openLog(t, path, Options{})
	require.NoError(t, l.Append(testRecord(0), true))
	rep, err = Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, before+1+rep.RecoveredCount, rep.Records)
	t.Logf("verified %d records before the kill; recovered torn tails: %d", before, rep.RecoveredCount)
}
