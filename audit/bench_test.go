package audit

import (
	"testing"
)

func benchAppend(b *testing.B, o Options, durable bool) {
	path := testPath(b)
	l := openLog(b, path, o)
	r := testRecord(0)
	b.ResetTimer()
	for b.Loop() {
		rec := *r
		if err := l.Append(&rec, durable); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendFsync: every record fsynced, the cost of the exec decision record.
func BenchmarkAppendFsync(b *testing.B) {
	benchAppend(b, Options{Fsync: FsyncAlways}, true)
}

// BenchmarkAppendNoFsync: lock, tail re-read, encode, hash, one write(2).
func BenchmarkAppendNoFsync(b *testing.B) {
	benchAppend(b, Options{Fsync: FsyncNever}, false)
}

// BenchmarkAppendDurablePolicy: the default policy for a non-durable record (no fsync).
func BenchmarkAppendDurablePolicy(b *testing.B) {
	benchAppend(b, Options{}, false)
}

func BenchmarkVerify(b *testing.B) {
	path := testPath(b)
	l := openLog(b, path, Options{Fsync: FsyncNever})
	appendN(b, l, 2000)
	b.ResetTimer()
	for b.Loop() {
		rep, err := Verify(path)
		if err != nil || !rep.OK {
			b.Fatal(err, rep.Break)
		}
	}
	b.ReportMetric(float64(b.N*2000)/b.Elapsed().Seconds(), "records/s")
}
