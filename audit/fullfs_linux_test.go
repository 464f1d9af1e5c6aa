// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// privateTmpfs mounts a tmpfs of the given size (mode 0700, as the log's directory must be)
// at a fresh directory, in a mount namespace private to the calling goroutine's thread: the
// goroutine is locked to its thread for good, so the thread (and the mount) die with the
// test even if it crashes, and nothing shows outside. Everything that uses a path under it
// must run on this goroutine (descriptors work from anywhere). Needs CAP_SYS_ADMIN.
func privateTmpfs(t *testing.T, size string) string {
	t.Helper()
	runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
	dir := filepath.Join(t.TempDir(), "fs")
	require.NoError(t, os.Mkdir(dir, 0o700))
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		testutil.SkipUnlessSupported(t, false, "a private mount namespace needs CAP_SYS_ADMIN: "+err.Error())
	}
	// Private propagation, so the tmpfs never shows in the host's namespace.
	require.NoError(t, unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
	require.NoError(t, unix.Mount("fledge-audit-test", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0700"))
	// Unmount before TempDir removes the directory (cleanups run last-in first-out).
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fill writes a filler file until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer f.Close()
	chunk := bytes.Repeat([]byte("f"), 512)
	for range 1 << 16 {
		if _, err := f.Write(chunk); err != nil {
			require.ErrorIs(t, err, unix.ENOSPC)
			return
		}
	}
	t.Fatal("the filesystem never filled up")
}

// bigRecord is a record of about 1.5 KB, so one never fits in what a page leaves over.
func bigRecord(i int) *Record {
	r := testRecord(i)
	r.Details["pad"] = strings.Repeat("p", 1500)
	return r
}

// A full disk under the audit log (the reproduction): appends fail with ENOSPC,
// each failed append leaves the log ending on a whole record so verify passes at once, and
// once space returns the next append continues the chain without any recovery record.
// Three ways in: a durable Append, AppendDeferredSync, and a log rotating while it fills.
func TestFullFilesystemRollsBack(t *testing.T) {
	scenarios := []struct {
		name     string
		opts     Options
		deferred bool
	}{
		{"durable append", Options{RotateBytes: -1}, false},
		{"deferred fsync", Options{RotateBytes: -1}, true},
		{"rotating", Options{RotateBytes: 8 << 10, Fsync: FsyncAlways}, false},
	}
	// One goroutine for all: the mounts exist only on this goroutine's thread, so no t.Run.
	root := privateTmpfs(t, "64k")
	for _, sc := range scenarios {
		t.Logf("scenario %s", sc.name)
		dir := filepath.Join(root, strings.ReplaceAll(sc.name, " ", "-"))
		require.NoError(t, os.Mkdir(dir, 0o700))
		path := filepath.Join(dir, "state", "audit.jsonl")
		l, err := Open(path, sc.opts)
		require.NoError(t, err, sc.name)
		appendOne := func(r *Record) error {
			if !sc.deferred {
				return l.Append(r, true)
			}
			sync, err := l.AppendDeferredSync(r)
			if err != nil {
				return err
			}
			return sync()
		}
		for i := range 3 {
			require.NoError(t, appendOne(bigRecord(i)), sc.name)
		}
		// Observe the real write: on a full tmpfs the kernel writes what fits in the file's
		// last page, then fails with ENOSPC, leaving a torn record for the rollback to undo.
		torn := 0
		l.io = fileIO{write: func(f *os.File, b []byte) (int, error) {
			n, err := f.Write(b)
			if err != nil {
				torn = n
			}
			return n, err
		}}
		filler := filepath.Join(root, "filler")
		fill(t, filler)

		written := 3
		var failed error
		for i := 0; i < 100 && failed == nil; i++ {
			before := liveBytes(t, path)
			if failed = appendOne(bigRecord(100 + i)); failed == nil {
				written++
				continue
			}
			assert.Equal(t, string(before), string(liveBytes(t, path)), "%s: the failed append left no bytes", sc.name)
		}
		require.Error(t, failed, "%s: no append failed on a full filesystem", sc.name)
		require.ErrorIs(t, failed, unix.ENOSPC, sc.name)
		t.Logf("%s: %d bytes of the record landed before ENOSPC", sc.name, torn)
		if sc.opts.RotateBytes < 0 {
			assert.Positive(t, torn, "%s: the failed write was partial", sc.name)
		}
		live := liveBytes(t, path)
		if len(live) > 0 {
			assert.Equal(t, byte('\n'), live[len(live)-1], "%s: the live file ends on a whole record", sc.name)
		}
		rep, err := Verify(path)
		require.NoError(t, err, sc.name)
		require.True(t, rep.OK, "%s: verify right after the failure: %v", sc.name, rep.Break)
		assert.Equal(t, written, rep.Records, sc.name)

		// Space returns: the chain continues where it stood, nothing to recover.
		require.NoError(t, os.Remove(filler))
		r := bigRecord(999)
		require.NoError(t, appendOne(r), sc.name)
		assert.Equal(t, uint64(written+1), r.Seq, sc.name)
		rep, err = Verify(path)
		require.NoError(t, err, sc.name)
		require.True(t, rep.OK, "%s: %v", sc.name, rep.Break)
		assert.Equal(t, written+1, rep.Records, sc.name)
		assert.Zero(t, rep.RecoveredCount, "%s: no torn bytes were left to recover", sc.name)
		require.NoError(t, l.Close())
		require.NoError(t, os.RemoveAll(dir))
	}
}

func liveBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	return b
}
