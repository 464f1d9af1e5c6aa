// SPDX-License-Identifier: MIT

package linux

import (
	"testing"

	"github.com/fledgehq/fledge/sandbox"
)

// BenchmarkCgroupLifecycle isolates the per-run cgroup cost (create with limits, remove).
func BenchmarkCgroupLifecycle(b *testing.B) {
	env := probeCgroups("")
	if !env.writable() {
		b.Skip("no writable cgroup")
	}
	lim := &sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256}
	for b.Loop() {
		rc, _, err := newRunCgroup(env, "bench", lim)
		if err != nil {
			b.Fatal(err)
		}
		if err := rc.remove(); err != nil {
			b.Fatal(err)
		}
	}
}
