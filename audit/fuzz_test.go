// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// seedLog returns the bytes of a small valid log with a recovered torn tail in it.
func seedLog(f *testing.F) []byte {
	path := filepath.Join(f.TempDir(), "seed", "audit.jsonl")
	l, err := Open(path, Options{Fsync: FsyncNever})
	require.NoError(f, err)
	for i := range 3 {
		require.NoError(f, l.Append(testRecord(i), false))
	}
	require.NoError(f, l.Close())
	b, err := os.ReadFile(path)
	require.NoError(f, err)
	require.NoError(f, os.WriteFile(path, b[:len(b)-30], 0o600))
	l, err = Open(path, Options{Fsync: FsyncNever}) // recovers the torn line
	require.NoError(f, err)
	require.NoError(f, l.Append(testRecord(9), false))
	require.NoError(f, l.Close())
	b, err = os.ReadFile(path)
	require.NoError(f, err)
	return b
}

func addSeeds(f *testing.F) {
	valid := seedLog(f)
	lines := bytes.SplitAfter(valid, []byte("\n"))
	f.Add(valid)
	f.Add(valid[:len(valid)-17])
	f.Add(bytes.Join([][]byte{lines[1], lines[0]}, nil))
	f.Add(bytes.Replace(valid, []byte("allow"), []byte("deny!"), 1))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte(`{"schema":1,"seq":1}` + "\n"))
	f.Add([]byte{})
}

// fuzzFile writes data as the log in dir (one per fuzz worker, reused: iterations of a
// worker run one at a time) and returns its path.
func fuzzFile(t *testing.T, dir string, data []byte) string {
	path := filepath.Join(dir, "audit.jsonl")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// FuzzVerify: arbitrary file content never panics, and a log that verifies reads back
// exactly the verified records, each re-encoding to its stored line.
func FuzzVerify(f *testing.F) {
	addSeeds(f)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := fuzzFile(t, dir, data)
		rep, err := Verify(path)
		require.NoError(t, err)
		require.Equal(t, rep.OK, rep.Break == nil)
		if !rep.OK {
			require.NotEmpty(t, rep.Break.Kind)
			return
		}
		n := 0
		require.NoError(t, Read(path, func(r *Record) error {
			n++
			_, lerr := JSONLine(r)
			return lerr
		}))
		require.Equal(t, rep.Records, n)
	})
}

// FuzzRead: arbitrary file content never panics; Read either walks or names a line.
func FuzzRead(f *testing.F) {
	addSeeds(f)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := fuzzFile(t, dir, data)
		_ = Read(path, func(r *Record) error {
			_ = ShortDetails(r.Details, colDetails)
			return nil
		})
	})
}

// FuzzParseLine: a line that parses is exactly the canonical encoding of what it decodes to.
func FuzzParseLine(f *testing.F) {
	for _, l := range bytes.Split(seedLog(f), []byte("\n")) {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, lerr := parseLine(line)
		if lerr != nil {
			return
		}
		got, err := JSONLine(r)
		require.NoError(t, err)
		require.Equal(t, string(line), string(got))
	})
}
