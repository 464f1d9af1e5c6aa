// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Environment switch that turns the test binary into a writer process, so the multi-process
// tests exercise real separate processes (flock, rotation races, kill -9).
const (
	envWriter      = "FLEDGE_AUDIT_TEST_WRITER" // log path
	envCount       = "FLEDGE_AUDIT_TEST_COUNT"  // records to write; 0 = until killed
	envRotate      = "FLEDGE_AUDIT_TEST_ROTATE"
	envFsync       = "FLEDGE_AUDIT_TEST_FSYNC"
	envDetailBytes = "FLEDGE_AUDIT_TEST_DETAIL_BYTES"
	envBarrier     = "FLEDGE_AUDIT_TEST_BARRIER" // wait for stdin EOF before writing
	envWitness     = "FLEDGE_AUDIT_TEST_WITNESS" // [audit] witness of the writer
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envWriter); path != "" {
		if err := writerMain(path); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func writerMain(path string) error {
	count, _ := strconv.Atoi(os.Getenv(envCount))
	rotate, _ := strconv.ParseInt(os.Getenv(envRotate), 10, 64)
	detail, _ := strconv.Atoi(os.Getenv(envDetailBytes))
	if os.Getenv(envBarrier) != "" {
		done := make(chan struct{})
		go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("barrier: no start signal within 30s")
		}
	}
	witness, err := ParseWitness(os.Getenv(envWitness))
	if err != nil {
		return err
	}
	var werr error
	l, err := Open(path, Options{Fsync: FsyncPolicy(os.Getenv(envFsync)), RotateBytes: rotate, Witness: witness,
		WitnessError: func(err error) { werr = err }})
	if err != nil {
		return err
	}
	defer l.Close()
	pad := string(bytes.Repeat([]byte("x"), detail))
	for i := 0; count == 0 || i < count; i++ {
		r := testRecord(i)
		if detail > 0 {
			r.Details["pad"] = pad
		}
		if err := l.Append(r, i%10 == 0); err != nil {
			return err
		}
		if i == 0 {
			fmt.Println("ready")
		}
	}
	if err := l.Close(); err != nil {
		return err
	}
	return werr
}

func testRecord(i int) *Record {
	return &Record{
		Session:  "sess-" + strconv.Itoa(os.Getpid()),
		Plugin:   &PluginRef{Name: "hello", Version: "1.0.0", Source: "/src/hello", ManifestDigest: "sha256:abc"},
		Event:    EventExecDecision,
		Decision: Allow,
		Reason:   "ok",
		Details:  map[string]any{DetailCommand: fmt.Sprintf("echo %d", i), "i": i},
		Sandbox:  &SandboxInfo{Mode: "landlock", LandlockABI: 7, CgroupMode: "v2"},
	}
}

func testPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "state", "fledge", "audit.jsonl")
}

func openLog(t testing.TB, path string, o Options) *Log {
	t.Helper()
	l, err := Open(path, o)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func appendN(t testing.TB, l *Log, n int) []*Record {
	t.Helper()
	out := make([]*Record, n)
	for i := range out {
		out[i] = testRecord(i)
		require.NoError(t, l.Append(out[i], false))
	}
	return out
}

// fileLines splits a file into its newline-terminated lines (newlines kept).
func fileLines(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return bytes.SplitAfter(b, []byte("\n"))
}

func writeLines(t testing.TB, path string, lines [][]byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, bytes.Join(lines, nil), 0o600))
}

// externalHash recomputes a stored line's hash the way docs/audit.md tells an outside tool
// to: drop the trailing `,"hash":"<64 hex>"}`, close the object, SHA-256.
func externalHash(line []byte) string {
	line = bytes.TrimSuffix(line, []byte("\n"))
	b := append(append([]byte{}, line[:len(line)-75]...), '}')
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readAll(t testing.TB, path string) []*Record {
	t.Helper()
	var out []*Record
	require.NoError(t, Read(path, func(r *Record) error { out = append(out, r); return nil }))
	return out
}
