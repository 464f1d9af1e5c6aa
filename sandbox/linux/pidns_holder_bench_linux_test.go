// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// BenchmarkPidHolderStart: a holder started and ended (its procfs received, its namespace
// opened, then closed and reaped), the forked one and fledge re-executed alternately in one
// loop; ns/op is both, cpu-ms-forked and cpu-ms-exec are each one's CPU (fledge's and the
// reaped holders'), wall-ms-forked and wall-ms-exec each one's start to ready.
func BenchmarkPidHolderStart(b *testing.B) {
	testutil.SkipUnlessSupported(b, os.Geteuid() == 0, "needs root")
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cpu := func() time.Duration {
		var self, kids unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
		_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
		d := func(r unix.Rusage) time.Duration {
			return time.Duration(r.Utime.Nano() + r.Stime.Nano())
		}
		return d(self) + d(kids)
	}
	var cpuT, wallT [2]time.Duration
	defer goHolder.Store(false)
	for i := 0; i < b.N; i++ {
		for k := 0; k < 2; k++ {
			goHolder.Store(k == 1)
			c0, t0 := cpu(), time.Now()
			h, err := startPidHolder(exe)
			if err != nil {
				b.Fatal(err)
			}
			wallT[k] += time.Since(t0)
			h.close()
			_, _ = h.proc.Wait()
			cpuT[k] += cpu() - c0
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(cpuT[0]), "cpu-ms-forked")
	b.ReportMetric(ms(cpuT[1]), "cpu-ms-exec")
	b.ReportMetric(ms(wallT[0]), "wall-ms-forked")
	b.ReportMetric(ms(wallT[1]), "wall-ms-exec")
}
