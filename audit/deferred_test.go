// SPDX-License-Identifier: MIT

package audit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendDeferredSync(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncDurable, FsyncAlways, FsyncNever} {
		t.Run(string(policy), func(t *testing.T) {
			path := testPath(t)
			// A tiny rotation size: the deferred sync must survive the file being renamed.
			l := openLog(t, path, Options{Fsync: policy, RotateBytes: 1})
			appendN(t, l, 2)
			r := testRecord(99)
			sync, err := l.AppendDeferredSync(r)
			require.NoError(t, err)
			assert.NotEmpty(t, r.Hash, "the record is written and sealed before sync")
			appendN(t, l, 2)
			require.NoError(t, sync())
			require.NoError(t, sync(), "a second call is harmless")
			rep, err := Verify(path)
			require.NoError(t, err)
			assert.True(t, rep.OK, "%+v", rep.Break)
			assert.Equal(t, 5, rep.Records)
		})
	}
}
