// SPDX-License-Identifier: MIT

package pins

import (
	"bytes"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/internal/filestamp"
)

// Check runs at every tool call of a long-lived host (`fledge serve` finds the tool, and
// so checks its pins, per call). What it decides follows from the pin file's bytes, the
// instructions and the listing alone whenever it writes nothing, so such a verdict is kept
// and given again for the same inputs: the file is still read at every call (an approval
// or a change on disk takes effect at the next call, as before), only its parse and the
// hashing of each definition are skipped when the bytes and the listing are the ones seen.

// maxMemo bounds the verdicts kept (one per plugin; past it they are all dropped).
const maxMemo = 256

type memoEntry struct {
	data    []byte
	stamp   filestamp.Stamp // of the file data was read from
	vouched bool            // the stamp vouches for data
	instr   string
	defs    []Def
	verdict *Verdict
}

var (
	// fileReads counts pin files read (tests check a vouched stamp spares the read).
	fileReads atomic.Int64
	memoMu    sync.Mutex
	memo      = map[string]*memoEntry{}
)

func memoKey(configDir, plugin string) string { return configDir + "\x00" + plugin }

func sameDefs(a, b []Def) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description || !bytes.Equal(a[i].InputSchema, b[i].InputSchema) {
			return false
		}
	}
	return true
}

func copyVerdict(v *Verdict) *Verdict {
	return &Verdict{Quarantined: maps.Clone(v.Quarantined), FirstUse: v.FirstUse}
}

// memoGet returns a copy of the verdict kept for exactly these inputs, or nil. over says
// the listing was past MaxTools (those are never kept).
func memoGet(configDir, plugin string, data []byte, instr string, defs []Def, over bool) *Verdict {
	if over {
		return nil
	}
	memoMu.Lock()
	defer memoMu.Unlock()
	e := memo[memoKey(configDir, plugin)]
	if e == nil || e.instr != instr || !bytes.Equal(e.data, data) || !sameDefs(e.defs, defs) {
		return nil
	}
	return copyVerdict(e.verdict)
}

// memoGetStamped is memoGet without reading the file: only while the stamp of the file at
// the path (not followed, as loadRaw opens it) is the vouched stamp of the kept bytes.
func memoGetStamped(configDir, plugin, instr string, defs []Def, over bool) *Verdict {
	if over {
		return nil
	}
	memoMu.Lock()
	e := memo[memoKey(configDir, plugin)]
	memoMu.Unlock()
	if e == nil || !e.vouched {
		return nil
	}
	fi, err := os.Lstat(path(configDir, plugin))
	if err != nil {
		return nil
	}
	if st, ok := filestamp.Of(fi, time.Now()); !ok || st != e.stamp {
		return nil
	}
	return memoGet(configDir, plugin, e.data, instr, defs, over)
}

// memoVouch lets the stamp of fi (the fstat loadRaw took before it read data) vouch for a
// kept entry of the same bytes that was kept before the file had settled: without it such
// an entry (the Check right after the one that wrote the file) is never vouched for, and
// every later Check reads the file again.
func memoVouch(configDir, plugin string, data []byte, fi os.FileInfo) {
	if fi == nil {
		return
	}
	st, ok := filestamp.Of(fi, time.Now())
	if !ok {
		return
	}
	memoMu.Lock()
	defer memoMu.Unlock()
	k := memoKey(configDir, plugin)
	if e := memo[k]; e != nil && !e.vouched && bytes.Equal(e.data, data) {
		// A new entry: readers look at the one they took without the lock.
		v := *e
		v.stamp, v.vouched = st, true
		memo[k] = &v
	}
}

// memoPut keeps v for these inputs; fi is the fstat loadRaw took before reading data.
func memoPut(configDir, plugin string, data []byte, fi os.FileInfo, instr string, defs []Def, v *Verdict) {
	if data == nil || fi == nil {
		return
	}
	e := &memoEntry{data: bytes.Clone(data), instr: instr, verdict: copyVerdict(v), defs: make([]Def, len(defs))}
	e.stamp, e.vouched = filestamp.Of(fi, time.Now())
	for i, d := range defs {
		e.defs[i] = Def{Name: d.Name, Description: d.Description, InputSchema: bytes.Clone(d.InputSchema)}
	}
	memoMu.Lock()
	defer memoMu.Unlock()
	if len(memo) >= maxMemo {
		clear(memo)
	}
	memo[memoKey(configDir, plugin)] = e
}
