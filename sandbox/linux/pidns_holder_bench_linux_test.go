// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
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
	var cpuT, wallT [2]time.Duration
	defer goHolder.Store(false)
	for i := 0; i < b.N; i++ {
		for k := 0; k < 2; k++ {
			goHolder.Store(k == 1)
			c0, t0 := cpuNow(), time.Now()
			h, err := startPidHolder(exe)
			if err != nil {
				b.Fatal(err)
			}
			wallT[k] += time.Since(t0)
			h.close()
			_, _ = h.proc.Wait()
			cpuT[k] += cpuNow() - c0
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(cpuT[0]), "cpu-ms-forked")
	b.ReportMetric(ms(cpuT[1]), "cpu-ms-exec")
	b.ReportMetric(ms(wallT[0]), "wall-ms-forked")
	b.ReportMetric(ms(wallT[1]), "wall-ms-exec")
}

// BenchmarkHideRootNSMakers: the idmapping user namespace made by a forked child
// (kernel.ForkUserNS) and by fledge started again under ptrace, alternately in one loop;
// cpu-ms-* and wall-ms-* are each one's (fledge's and the reaped children's CPU).
func BenchmarkHideRootNSMakers(b *testing.B) {
	testutil.SkipUnlessSupported(b, os.Geteuid() == 0, "needs root")
	var idMap string
	for _, m := range hideRootMap {
		idMap += fmt.Sprintf("%d %d %d\n", m.ContainerID, m.HostID, m.Size)
	}
	makers := []func() (int, error){
		func() (int, error) { return kernel.ForkUserNS(idMap, idMap) },
		execHideRootNS,
	}
	var cpuT, wallT [2]time.Duration
	for i := 0; i < b.N; i++ {
		for k, mk := range makers {
			c0, t0 := cpuNow(), time.Now()
			fd, err := mk()
			if err != nil {
				b.Fatal(err)
			}
			wallT[k] += time.Since(t0)
			cpuT[k] += cpuNow() - c0
			unix.Close(fd)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(cpuT[0]), "cpu-ms-forked")
	b.ReportMetric(ms(cpuT[1]), "cpu-ms-exec")
	b.ReportMetric(ms(wallT[0]), "wall-ms-forked")
	b.ReportMetric(ms(wallT[1]), "wall-ms-exec")
}

// cpuNow is this process's CPU and its reaped children's.
func cpuNow() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}
