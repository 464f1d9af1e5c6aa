// SPDX-License-Identifier: MIT

package stub

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWatchdogRecordBatches: the host sends a run's registrations in one message,
// NUL-separated; every record of it counts, and a path is never cut at a newline (only a
// NUL, which no path holds, separates records).
func TestWatchdogRecordBatches(t *testing.T) {
	cgs, pgs := map[string]bool{}, map[int]bool{}
	apply := func(msg string) {
		for _, rec := range strings.Split(msg, "\x00") {
			handleRecord(rec, cgs, pgs, 7)
		}
	}
	apply("+cg /sys/fs/cgroup/unified/run-a\x00+cg /sys/fs/cgroup/memory/run-a\x00+cg /sys/fs/cgroup/pids/run-a\x00+pg 42")
	assert.Equal(t, map[string]bool{
		"/sys/fs/cgroup/unified/run-a": true, "/sys/fs/cgroup/memory/run-a": true, "/sys/fs/cgroup/pids/run-a": true,
	}, cgs)
	assert.Equal(t, map[int]bool{42: true}, pgs)
	apply("+cg /x/with\nnewline\x00+pg 7\x00+pg 1\x00+cg relative")
	assert.True(t, cgs["/x/with\nnewline"], "a newline is part of the path")
	assert.False(t, pgs[7], "the host's own process group is never registered")
	assert.False(t, pgs[1])
	assert.False(t, cgs["relative"])
	apply("-cg /sys/fs/cgroup/memory/run-a\x00-cg /sys/fs/cgroup/pids/run-a\x00-pg 42")
	assert.Equal(t, map[string]bool{"/sys/fs/cgroup/unified/run-a": true, "/x/with\nnewline": true}, cgs)
	assert.Empty(t, pgs)
}
