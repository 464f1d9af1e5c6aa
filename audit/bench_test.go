// SPDX-License-Identifier: MIT

package audit

import (
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
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

// BenchmarkHead: the head update per durable append (a pread of the head and one 512-byte
// pwrite, no fsync), against the same appends with no head file. fsync=never isolates it
// from the disk flush; fsync=always is what an exec decision costs in total.
func BenchmarkHead(b *testing.B) {
	for _, fs := range []FsyncPolicy{FsyncNever, FsyncAlways} {
		for _, head := range []bool{true, false} {
			name := string(fs) + "/head"
			if !head {
				name = string(fs) + "/nohead"
			}
			b.Run(name, func(b *testing.B) {
				l := openLog(b, testPath(b), Options{Fsync: fs})
				if !head {
					l.head.Close()
					l.head = nil
				}
				r := testRecord(0)
				b.ResetTimer()
				for b.Loop() {
					rec := *r
					if err := l.Append(&rec, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkHeadWitnessSocket: a durable append whose checkpoint also goes to a syslog-style
// datagram socket (a listener that drains it, as a syslog daemon would).
func BenchmarkHeadWitnessSocket(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "log.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	w, err := ParseWitness("syslog:" + sock)
	if err != nil {
		b.Fatal(err)
	}
	l := openLog(b, testPath(b), Options{Fsync: FsyncNever, Witness: w})
	r := testRecord(0)
	b.ResetTimer()
	for b.Loop() {
		rec := *r
		if err := l.Append(&rec, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeadWrite: the head update alone (encode a slot, one 512-byte pwrite), what
// advanceHead adds to a durable append besides the witness.
func BenchmarkHeadWrite(b *testing.B) {
	l := openLog(b, testPath(b), Options{Fsync: FsyncNever})
	pos := chainPos{1, ZeroHash}
	t := time.Now()
	b.ResetTimer()
	for b.Loop() {
		pos.seq++
		if err := writeHead(l.head, Head{Seq: pos.seq, Hash: pos.hash, Time: t}, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendFsyncParallel: durable appends from 8 goroutines at once, the case group
// commit is for (concurrent tool calls, pipelined execs): they share fsyncs.
func BenchmarkAppendFsyncParallel(b *testing.B) {
	path := testPath(b)
	l := openLog(b, path, Options{Fsync: FsyncDurable})
	var syncs atomic.Int64
	l.io.sync = func(f *os.File) error { syncs.Add(1); return f.Sync() }
	r := testRecord(0)
	b.SetParallelism(4) // 4 x GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := *r
			if err := l.Append(&rec, true); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(b.N)/float64(max(syncs.Load(), 1)), "records/fsync")
}
