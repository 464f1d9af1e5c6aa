// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"zero is default", Options{}, true},
		{"always", Options{Fsync: FsyncAlways}, true},
		{"never rotate", Options{RotateBytes: -1}, true},
		{"bad fsync", Options{Fsync: "sometimes"}, false},
		{"negative rotate", Options{RotateBytes: -2}, false},
		{"record too small", Options{MaxRecordBytes: MinRecordBytes - 1}, false},
		{"record larger than readers accept", Options{MaxRecordBytes: DefaultMaxRecordBytes + 1}, false},
		{"negative lock timeout", Options{LockTimeout: -time.Second}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(testPath(t), tc.o)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidOptions)
			}
		})
	}
}

func TestDefaultPath(t *testing.T) {
	tests := []struct {
		name                 string
		env, xdg, home, want string
	}{
		{"env wins", "/x/audit.jsonl", "/state", "/home/u", "/x/audit.jsonl"},
		{"xdg state", "", "/state", "/home/u", "/state/fledge/audit.jsonl"},
		{"relative xdg ignored", "", "rel/state", "/home/u", "/home/u/.local/state/fledge/audit.jsonl"},
		{"home", "", "", "/home/u", "/home/u/.local/state/fledge/audit.jsonl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLEDGE_AUDIT_LOG", tc.env)
			t.Setenv("XDG_STATE_HOME", tc.xdg)
			t.Setenv("HOME", tc.home)
			got, err := DefaultPath()
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestAppendFillsWriterFields(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	recs := appendN(t, l, 3)
	host, _ := os.Hostname()
	prev := ZeroHash
	for i, r := range recs {
		assert.Equal(t, SchemaVersion, r.Schema)
		assert.Equal(t, uint64(i+1), r.Seq)
		assert.Equal(t, time.UTC, r.Time.Location())
		assert.WithinDuration(t, time.Now(), r.Time, time.Hour)
		assert.Equal(t, host, r.Host)
		assert.Equal(t, os.Getuid(), r.UID)
		assert.Equal(t, os.Getpid(), r.PID)
		assert.Equal(t, prev, r.PrevHash)
		assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{64}$`), r.Hash)
		prev = r.Hash
	}
	// The stored lines hash the way docs/audit.md tells an outside tool, and read back equal.
	lines := fileLines(t, path)
	require.Len(t, lines, 4) // 3 lines + empty remainder
	back := readAll(t, path)
	for i, r := range recs {
		assert.Equal(t, r.Hash, externalHash(lines[i]))
		assert.Equal(t, r.Hash, back[i].Hash)
		assert.True(t, back[i].Time.Equal(r.Time))
		got, err := JSONLine(back[i])
		require.NoError(t, err)
		assert.Equal(t, string(bytes.TrimSuffix(lines[i], []byte("\n"))), string(got), "JSONLine reproduces the stored line")
	}
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	path := testPath(t)
	openLog(t, path, Options{})
	for _, p := range []string{filepath.Dir(path), filepath.Dir(filepath.Dir(path))} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), p)
	}
	for _, p := range []string{path, path + ".lock"} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}
}

func TestOpenRefusesUnsafePaths(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  error
		check func(t *testing.T, path string)
	}{
		{"symlinked log", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "elsewhere")
			require.NoError(t, os.WriteFile(target, nil, 0o600))
			require.NoError(t, os.Symlink(target, path))
		}, ErrSymlink, nil},
		{"symlinked lock", func(t *testing.T, path string) {
			require.NoError(t, os.Symlink("/etc/passwd", path+".lock"))
		}, ErrSymlink, nil},
		{"fifo", func(t *testing.T, path string) {
			require.NoError(t, unix.Mkfifo(path, 0o600))
		}, ErrNotRegular, nil},
		{"directory", func(t *testing.T, path string) {
			require.NoError(t, os.Mkdir(path, 0o700))
		}, nil, nil},
		{"world-writable dir", func(t *testing.T, path string) {
			require.NoError(t, os.Chmod(filepath.Dir(path), 0o777))
		}, ErrInsecurePerms, nil},
		{"group-readable dir is tightened", func(t *testing.T, path string) {
			require.NoError(t, os.Chmod(filepath.Dir(path), 0o750))
		}, nil, func(t *testing.T, path string) {
			fi, err := os.Stat(filepath.Dir(path))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
		}},
		{"world-readable file is tightened", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o644))
			require.NoError(t, os.Chmod(path, 0o644))
		}, nil, func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		}},
		{"file of another user", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to chown a file to another user")
			}
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			require.NoError(t, os.Chown(path, 4242, 4242))
		}, ErrInsecurePerms, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
			tc.setup(t, path)
			l, err := Open(path, Options{})
			if tc.want == nil && tc.check == nil {
				require.Error(t, err) // a directory is no log
				return
			}
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			l.Close()
			tc.check(t, path)
		})
	}
}

func TestAppendAfterClose(t *testing.T) {
	l, err := Open(testPath(t), Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.ErrorIs(t, l.Append(testRecord(0), false), ErrClosed)
}

func TestLockTimeout(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{LockTimeout: 50 * time.Millisecond})
	holder, err := os.OpenFile(path+".lock", os.O_RDWR, 0)
	require.NoError(t, err)
	defer holder.Close()
	require.NoError(t, flockWait(holder, lockEx, time.Second))
	r := testRecord(0)
	require.ErrorIs(t, l.Append(r, false), ErrLockTimeout)
	assert.Zero(t, r.Seq, "a failed append leaves the record untouched")
	assert.Empty(t, r.Hash)
	require.NoError(t, funlock(holder))
	require.NoError(t, l.Append(testRecord(0), false))
}

func TestConcurrentGoroutines(t *testing.T) {
	path := testPath(t)
	l1 := openLog(t, path, Options{Fsync: FsyncNever})
	l2 := openLog(t, path, Options{Fsync: FsyncNever}) // a second handle: its own flock
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := l1
			if g%2 == 1 {
				l = l2
			}
			for i := range 25 {
				assert.NoError(t, l.Append(testRecord(i), false))
			}
		}()
	}
	wg.Wait()
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, 200, rep.Records)
}

func TestCanonicalDetails(t *testing.T) {
	type unsorted struct {
		Zed   int    `json:"zed"`
		Alpha string `json:"alpha"`
	}
	path := testPath(t)
	l := openLog(t, path, Options{})
	r := testRecord(0)
	r.Details = map[string]any{
		"struct":  unsorted{Zed: 1, Alpha: "a"},
		"badutf8": "a\xffb",
		"html":    "<script>&</script>",
		"bigint":  int64(math.MaxInt64),
		"float":   1.5e300,
		"nested":  map[string]any{"b": []any{1, "x", nil, true}, "a": map[string]int{"y": 2, "x": 1}},
		"sep":     "line\u2028sep",
	}
	require.NoError(t, l.Append(r, false))
	lines := fileLines(t, path)
	assert.Contains(t, string(lines[0]), `"html":"<script>&</script>"`, "no HTML escaping")
	assert.Contains(t, string(lines[0]), `"bigint":9223372036854775807`)
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, r.Hash, externalHash(lines[0]))
}

func TestUnencodableDetailsStillRecorded(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	r := testRecord(0)
	r.Details = map[string]any{"x": math.NaN()}
	require.NoError(t, l.Append(r, false))
	assert.Contains(t, r.Details, DetailEncodeError)
	recs := readAll(t, path)
	require.Len(t, recs, 1)
	assert.Contains(t, recs[0].Details[DetailEncodeError], "NaN")
	rep, err := Verify(path)
	require.NoError(t, err)
	assert.True(t, rep.OK)
}

func TestOversizedRecordIsTruncated(t *testing.T) {
	tests := []struct {
		name string
		mod  func(r *Record)
	}{
		// Past the field bounds (one string, one list), many values still add up: 1,000 keys
		// of 100 bytes (each within the bounds, the string budget then spent on markers).
		{"big details", func(r *Record) {
			for i := range 1000 {
				r.Details[fmt.Sprintf("k%04d", i)] = strings.Repeat("y", 100)
			}
		}},
		{"escape-heavy details", func(r *Record) { r.Details["out"] = strings.Repeat("\x01\"", 40<<10) }},
		{"huge strings everywhere", func(r *Record) {
			big := strings.Repeat("\x02", 20<<10)
			r.Details["out"] = big
			r.Session, r.Reason = big, big
			r.Plugin.Name, r.Plugin.Source, r.Plugin.Version, r.Plugin.ManifestDigest = big, big, big, big
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			l := openLog(t, path, Options{MaxRecordBytes: MinRecordBytes, MaxListItems: 1024})
			r := testRecord(0)
			tc.mod(r)
			orig, err := json.Marshal(r.Details)
			require.NoError(t, err)
			require.NoError(t, l.Append(r, false))
			lines := fileLines(t, path)
			assert.LessOrEqual(t, len(lines[0]), MinRecordBytes)
			recs := readAll(t, path)
			require.Len(t, recs, 1)
			d := recs[0].Details
			assert.Equal(t, true, d[DetailTruncated])
			assert.Regexp(t, `^[0-9a-f]{64}$`, d[DetailOrigSHA256])
			if tc.name == "big details" {
				assert.NotEmpty(t, d[DetailPreview])
				assert.Greater(t, len(lines[0]), MinRecordBytes-200, "the preview fills the room")
			}
			assert.Greater(t, len(orig), MinRecordBytes)
			rep, err := Verify(path)
			require.NoError(t, err)
			assert.True(t, rep.OK, "%v", rep.Break)
		})
	}
}

func TestTornTailRecovery(t *testing.T) {
	tests := []struct {
		name string
		// damage the 5-record log; wantBreak is what Verify says before recovery
		damage       func(t *testing.T, path string)
		wantBreak    BreakKind
		wantRecords  int // records verified before recovery
		wantRecovery bool
	}{
		{"cut mid-line", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			require.NoError(t, os.WriteFile(path, b[:len(b)-40], 0o600))
		}, BreakTornTail, 4, true},
		{"complete record without newline", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			require.NoError(t, os.WriteFile(path, b[:len(b)-1], 0o600))
		}, BreakTornTail, 4, false},
		{"torn line then torn recovery", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			require.NoError(t, os.WriteFile(path, append(b[:len(b)-40], "\n{\"schema\":1,\"seq\":5,\"ti"...), 0o600))
		}, BreakTornTail, 4, true},
		{"torn first write of a new file", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(`{"schema":1,"se`), 0o600))
		}, BreakTornTail, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			l := openLog(t, path, Options{RotateBytes: -1})
			appendN(t, l, 5)
			require.NoError(t, l.Close())
			tc.damage(t, path)

			rep, err := Verify(path)
			require.NoError(t, err)
			require.False(t, rep.OK)
			assert.Equal(t, tc.wantBreak, rep.Break.Kind, rep.Break.String())
			assert.Equal(t, tc.wantRecords, rep.Records)
			assert.Len(t, readAll(t, path), tc.wantRecords, "Read skips the torn line")

			l2 := openLog(t, path, Options{RotateBytes: -1}) // Open repairs the tail
			rep, err = Verify(path)
			require.NoError(t, err)
			require.True(t, rep.OK, "%v", rep.Break)
			recovered := 0
			if tc.wantRecovery {
				recovered = 1
				require.Len(t, rep.Recovered, 1)
				assert.Equal(t, tc.wantRecords+1, rep.Recovered[0].Line)
			}
			assert.Equal(t, recovered, rep.RecoveredCount)
			wantAfter := tc.wantRecords + recovered
			if !tc.wantRecovery {
				wantAfter = 5 // the complete record counts once terminated
			}
			assert.Equal(t, wantAfter, rep.Records)

			r := testRecord(99)
			require.NoError(t, l2.Append(r, true))
			assert.Equal(t, uint64(wantAfter+1), r.Seq)
			rep, err = Verify(path)
			require.NoError(t, err)
			require.True(t, rep.OK, "%v", rep.Break)
			recs := readAll(t, path)
			assert.Len(t, recs, wantAfter+1)
			if tc.wantRecovery {
				assert.Equal(t, EventLogRecovered, recs[tc.wantRecords].Event)
			}
		})
	}
}

func TestTamperedTailRefused(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	appendN(t, l, 3)
	lines := fileLines(t, path)
	lines[2] = bytes.Replace(lines[2], []byte(`"decision":"allow"`), []byte(`"decision":"deny"`), 1)
	writeLines(t, path, lines)
	require.ErrorIs(t, l.Append(testRecord(9), false), ErrCorruptTail)
	_, err := Open(path, Options{})
	require.ErrorIs(t, err, ErrCorruptTail)
}

func TestRotationContinuesChain(t *testing.T) {
	path := testPath(t)
	l1 := openLog(t, path, Options{RotateBytes: 4096, Fsync: FsyncNever})
	l2 := openLog(t, path, Options{RotateBytes: 4096, Fsync: FsyncNever})
	for i := range 60 {
		l := l1
		if i%3 == 0 {
			l = l2 // the other handle must notice the rename and follow
		}
		require.NoError(t, l.Append(testRecord(i), false))
	}
	rs, err := listRotated(path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(rs), 3)
	for i, r := range rs {
		assert.Equal(t, rotatedName(path, uint64(i+1)), r.path)
		fi, err := os.Stat(r.path)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, fi.Size(), int64(4096))
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	}
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, 60, rep.Records)
	assert.Len(t, rep.Files, len(rs)+1)

	recs := readAll(t, path)
	require.Len(t, recs, 60)
	for i, r := range recs {
		assert.Equal(t, uint64(i+1), r.Seq)
	}
	// The first record of the second file chains to the last of the first.
	first := fileLines(t, rs[0].path)
	second := fileLines(t, rs[1].path)
	last, lerr := parseLine(bytes.TrimSuffix(first[len(first)-2], []byte("\n")))
	require.Nil(t, lerr)
	head, lerr := parseLine(bytes.TrimSuffix(second[0], []byte("\n")))
	require.Nil(t, lerr)
	assert.Equal(t, last.Hash, head.PrevHash)

	// Removing a rotated file is a deletion.
	require.NoError(t, os.Remove(rs[1].path))
	rep, err = Verify(path)
	require.NoError(t, err)
	require.False(t, rep.OK)
	assert.Equal(t, BreakDeleted, rep.Break.Kind, rep.Break.String())
	assert.Equal(t, rs[2].path, rep.Break.File)
}

func TestReadLineTooLong(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	appendN(t, l, 2)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(append(bytes.Repeat([]byte("z"), MaxLineBytes+10), '\n'))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	err = Read(path, func(*Record) error { return nil })
	require.ErrorIs(t, err, ErrLineTooLong)
	var le *LineError
	require.True(t, errors.As(err, &le))
	assert.Equal(t, 3, le.Line)
	assert.Equal(t, path, le.File)

	rep, err := Verify(path)
	require.NoError(t, err)
	require.False(t, rep.OK)
	assert.Equal(t, BreakBadJSON, rep.Break.Kind)
	assert.Equal(t, 3, rep.Break.Line)
	assert.Equal(t, 2, rep.Records)
}

func TestNoLog(t *testing.T) {
	_, err := Verify(testPath(t))
	require.ErrorIs(t, err, ErrNoLog)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorIs(t, Read(testPath(t), func(*Record) error { return nil }), ErrNoLog)
}
