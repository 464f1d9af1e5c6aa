// SPDX-License-Identifier: MIT

//go:build linux

package audit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWitnessSyslogRsyslogd sends checkpoints to a real rsyslogd listening on a socket of
// the test's own (as /dev/log would be) and reads them back from the file it writes: the
// witness a user cannot rewrite when the daemon and its files belong to root.
func TestWitnessSyslogRsyslogd(t *testing.T) {
	rsyslogd, err := exec.LookPath("rsyslogd")
	if err != nil {
		if os.Getenv("FLEDGE_REQUIRE_SANDBOX") != "" {
			t.Fatal("rsyslogd is not installed (apt-get install rsyslog)")
		}
		t.Skip("rsyslogd is not installed")
	}
	dir := t.TempDir()
	sock, out := filepath.Join(dir, "log.sock"), filepath.Join(dir, "syslog")
	conf := filepath.Join(dir, "rsyslog.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`global(workDirectory="`+dir+`")
module(load="imuxsock" SysSock.Use="off")
input(type="imuxsock" Socket="`+sock+`")
*.* action(type="omfile" file="`+out+`")
`), 0o600))
	cmd := exec.Command(rsyslogd, "-n", "-f", conf, "-i", filepath.Join(dir, "pid"))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, 5*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }, "rsyslogd socket: %s", &stderr)

	w, err := ParseWitness("syslog:" + sock)
	require.NoError(t, err)
	path := testPath(t)
	var werr error
	l := openLog(t, path, Options{Witness: w, WitnessError: func(err error) { werr = err }})
	durableN(t, l, 3)
	appendN(t, l, 2) // not durable: no checkpoint
	require.NoError(t, l.Close())
	require.NoError(t, werr)

	var h *Head
	waitFor(t, 5*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		h, _ = ParseCheckpoints(bytes.NewReader(b), path)
		return h != nil && h.Seq == 3
	}, "checkpoint seq 3 in %s", out)
	head, err := ReadHead(path)
	require.NoError(t, err)
	assert.Equal(t, *head, Head{Seq: h.Seq, Hash: h.Hash, Time: h.Time.UTC()}, "the witness holds the head")

	// Truncate and rewrite the head to match: only the witness still knows.
	writeLines(t, path, fileLines(t, path)[:2])
	require.NoError(t, os.Remove(path+HeadSuffix))
	requireOK(t, path, VerifyOptions{})
	requireBroken(t, path, VerifyOptions{Witness: h}, BreakTruncated, "record seq 3 is missing")
}
