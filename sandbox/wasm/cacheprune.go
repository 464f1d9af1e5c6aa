// SPDX-License-Identifier: MIT

package wasm

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The compilation cache dir is bounded. Every module ever started left its machine code
// (wazero's entry, about four times the module's size), its merged bytes and a kept copy
// there, and nothing took them away: a plugin updated or removed kept its entries, and an
// older fledge's wazero version its whole subdirectory. Now, after a compile that wrote to
// the dir (one of its subdirectories changed during the compile), the
// entries are summed and, over CacheMaxBytes, the least recently used are removed until the
// dir is back under it. Last use is the later of an entry's access time (the kernel's, at
// least once a day with relatime; a mount with noatime leaves the time it was written) and
// its modification time.
//
// Never removed: an entry used or written in the last cacheInUse (this start's own, and a
// concurrent process's), and a temporary file younger than cacheStaleTmp (another process's
// write under way). Removing is an unlink: a running module whose code or merged bytes are
// mapped from an entry keeps its pages (Linux maps them; elsewhere they are copied), and the
// next start without the entry compiles again and writes it anew. Only fledge's own
// subdirectories are looked at (wazero-*, fledge-merged, fledge-modules; an older wazero's
// subdirectory is emptied, never removed, as fledge cannot tell which one its wazero writes
// to); the pass is bounded (cacheScanMax entries) and best effort: a file it cannot stat or
// remove is left.

// CacheMaxBytes bounds the compilation cache dir's entries (bytes): about twenty Go-built
// modules (machine code, merged bytes and kept copy: some 23 MB each), hundreds of small ones.
const CacheMaxBytes = 512 << 20

const (
	// cacheInUse: an entry used or written this recently is never removed.
	cacheInUse = 10 * time.Minute
	// cacheStaleTmp: a temporary file this old is a write that never finished.
	cacheStaleTmp = time.Hour
	// cacheScanMax bounds the entries one pass looks at.
	cacheScanMax = 1 << 16
	// cacheClockSlack is how far behind time.Now a file system's times may be.
	cacheClockSlack = 50 * time.Millisecond
)

// cacheMaxBytes is CacheMaxBytes, lowered by tests.
var cacheMaxBytes int64 = CacheMaxBytes

// cacheSubdir reports whether name is one of fledge's subdirectories of the cache dir.
func cacheSubdir(name string) bool {
	return strings.HasPrefix(name, "wazero-") || name == mergedDir || name == keptDir
}

// maybePruneCache runs a pass over dir when one of its subdirectories changed since since
// (a compile's start: an entry was written during it, by this process or another), and
// otherwise costs a directory read and a few stats.
func maybePruneCache(dir string, since, now time.Time) {
	if dir == "" {
		return
	}
	subs, err := knownSubdirs(dir)
	if err != nil {
		return
	}
	// A file system stamps with a coarse clock, up to a tick behind time.Now.
	since = since.Add(-cacheClockSlack)
	for _, s := range subs {
		if fi, err := os.Lstat(s); err == nil && fi.IsDir() && fi.ModTime().After(since) {
			pruneCache(dir, cacheMaxBytes, now)
			return
		}
	}
}

// knownSubdirs is cacheSubdirs read once per process and dir (a new one appears only with
// another wazero version, at New), and the two of fledge's (made on first write).
func knownSubdirs(dir string) ([]string, error) {
	if v, ok := subdirsSeen.Load(dir); ok {
		return v.([]string), nil
	}
	subs, err := cacheSubdirs(dir)
	if err != nil {
		return nil, err
	}
	for _, own := range []string{mergedDir, keptDir} {
		if p := filepath.Join(dir, own); !slices.Contains(subs, p) {
			subs = append(subs, p)
		}
	}
	subdirsSeen.Store(dir, subs)
	return subs, nil
}

var subdirsSeen sync.Map // cache dir → its subdirectories

func cacheSubdirs(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(256)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if cacheSubdir(n) {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out, nil
}

type cacheEntry struct {
	path string
	size int64
	used time.Time
}

// pruneCache removes the least recently used entries of dir's subdirectories until what
// stays is at most max bytes (entries in use excepted), and temporary files left by writes
// that never finished. It returns the bytes that stay.
func pruneCache(dir string, max int64, now time.Time) int64 {
	subs, err := cacheSubdirs(dir)
	if err != nil {
		return 0
	}
	var entries []cacheEntry
	var total int64
	seen := 0
	for _, s := range subs {
		d, err := os.Open(s)
		if err != nil {
			continue
		}
		for seen < cacheScanMax {
			des, err := d.ReadDir(1024)
			for _, de := range des {
				seen++
				if !de.Type().IsRegular() {
					continue
				}
				fi, err := de.Info()
				if err != nil {
					continue
				}
				p := filepath.Join(s, de.Name())
				used := lastUsed(fi)
				if strings.HasSuffix(de.Name(), ".tmp") && now.Sub(used) > cacheStaleTmp {
					_ = os.Remove(p)
					continue
				}
				total += fi.Size()
				entries = append(entries, cacheEntry{path: p, size: fi.Size(), used: used})
			}
			if err != nil {
				break
			}
		}
		d.Close()
	}
	if total <= max {
		return total
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].used.Before(entries[j].used) })
	for _, e := range entries {
		if total <= max {
			break
		}
		if now.Sub(e.used) < cacheInUse || strings.HasSuffix(e.path, ".tmp") {
			continue
		}
		if err := os.Remove(e.path); err == nil || errors.Is(err, os.ErrNotExist) {
			total -= e.size
		}
	}
	return total
}

// lastUsed is the later of fi's access and modification times.
func lastUsed(fi os.FileInfo) time.Time {
	if a, ok := accessTime(fi); ok && a.After(fi.ModTime()) {
		return a
	}
	return fi.ModTime()
}
