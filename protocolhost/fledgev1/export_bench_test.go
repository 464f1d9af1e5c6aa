// SPDX-License-Identifier: MIT

package fledgev1

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/audit/otlp"
	"github.com/fledgehq/fledge/testkit/collectortest"
)

// BenchmarkExecExportAB: the exec round trip of `true` with [audit] export on against off,
// in sessions of 20 execs that alternate, so a load spike hits both alike. "On" is the
// background exporter a fledge process runs (its default interval, 1 s), sending to a real
// OpenTelemetry Collector (testkit/otelcollector). Reports on-ns/op and off-ns/op
// (medians of the sessions' medians), ratio (the median of each round's on/off ratio) and how many records reached the collector before the
// exporter's last round (so a run that sent nothing meanwhile shows it).
func BenchmarkExecExportAB(b *testing.B) {
	bin := benchPlugin(b)
	col := collectortest.Start(b)
	off := newBenchEnv(b, bin, audit.FsyncDurable)
	on := newBenchEnv(b, bin, audit.FsyncDurable)
	c, err := otlp.NewClient(otlp.Config{URL: col.URL()})
	if err != nil {
		b.Fatal(err)
	}
	exp := otlp.NewExporter(on.auditPath, c, otlp.Options{})
	exp.Start()
	const per = 20
	rounds := max(b.N/per, 1)
	var onT, offT []int64
	b.ResetTimer()
	for i := 0; i < rounds; i++ {
		for _, side := range []struct {
			e   *benchEnv
			out *[]int64
		}{{off, &offT}, {on, &onT}} {
			var rep execReport
			side.e.run(b, &rep, "exec", strconv.Itoa(per))
			if rep.N != per {
				b.Fatalf("plugin ran %d execs, want %d", rep.N, per)
			}
			*side.out = append(*side.out, rep.Median)
		}
	}
	b.StopTimer()
	during := len(col.Received())
	exp.Close(5 * time.Second)
	med := func(v []int64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return float64(s[len(s)/2])
	}
	b.ReportMetric(med(onT), "on-ns/op")
	b.ReportMetric(med(offT), "off-ns/op")
	// Each round's on/off pair ran back to back: the median of the pairs' ratios is what
	// a load change elsewhere on the machine disturbs least.
	ratios := make([]int64, len(onT))
	for i := range onT {
		ratios[i] = onT[i] * 1_000_000 / max(offT[i], 1)
	}
	b.ReportMetric(med(ratios)/1_000_000, "ratio")
	b.ReportMetric(float64(during), "exported-during")
}
