// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/internal/gitindex"
	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/sandbox"
)

// Nested repositories the index points at.
//
// The user's git status in a repository recurses into every gitlink of its index (mode
// 160000: a submodule, or a nested repository) whose <path>/.git exists, running a git
// status there, which runs that repository's core.fsmonitor, outside any sandbox. A mount
// cannot stop a confined command from making sub/.git in a writable directory, and git
// must be able to write the index, so the command can make a new repository with a
// planted config and record it as a gitlink. Two things close that:
//
//   - at launch, every gitlink's .git (a directory, or a .git file and the git directory it
//     names) is protected like a submodule's git directory, at any depth: an existing
//     nested repository cannot be armed by a later run;
//   - when a run ends (its whole tree gone, before its Result is published), every
//     gitlink of the checkouts seen at its launch is looked at again, and a .git there that
//     is not in that index's baseline (below) is renamed to
//     .git.fledge-quarantine-<unix time>, through safefs (never following a symlink), and
//     reported in Result.Quarantined, so the user's git no longer recurses into it and the
//     adapter records and says what was moved. Nothing is deleted.
//
// The baseline is per Sandbox (one fledge process): the gitlinks with a .git when a launch
// read the index while no other run was active on it (nestedStore.baseline). A per-run
// one would let two concurrent runs of a plugin hand a repository between them (one adds
// the gitlink while the other's launch sees it, the first removes it, the second adds it
// again). The index is read by fledge itself (internal/gitindex),
// never by the host's git, whose config in that repository is the danger.

// Bounds of an index read. Past them the launch is refused (errGitProtect), as the other
// bounds of the walk; after a run, an index past them, or one that cannot be read, is
// quarantined itself (git then sees an empty index and recurses into nothing).
const (
	// maxIndexBytes is how large an index (or a split index's shared index) is read: a
	// checkout of 400000 files has an index of about 40 MiB.
	maxIndexBytes = 128 << 20
	// maxIndexEntries is how many entries an index may hold.
	maxIndexEntries = 2 << 20
	// maxGitlinks is how many gitlinks of one index are looked at.
	maxGitlinks = 4096
	// maxBaselines is how many indexes a Sandbox keeps a baseline for; past it an index
	// has none, and every gitlink .git found after a run is quarantined.
	maxBaselines = 4096
)

// quarantineSuffix is what a quarantined .git (or index) is renamed to, plus a unix time.
const quarantineSuffix = ".fledge-quarantine-"

// gitFileID is the identity of a file: the same inode, unchanged (size and times only for an
// index, whose content matters; a git directory is pinned by a mount while a run lasts).
type gitFileID struct {
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
	ctime    unix.Timespec
}

func idOf(st *unix.Stat_t, content bool) gitFileID {
	id := gitFileID{dev: st.Dev, ino: st.Ino}
	if content {
		id.size, id.mtime, id.ctime = st.Size, st.Mtim, st.Ctim
	}
	return id
}

// indexedCheckout is a checkout whose index a launch read.
type indexedCheckout struct {
	index    string   // the index file (real path)
	gitDirs  []string // where sharedindex.* lies (the git directory, and a common one)
	checkout string   // the checkout the gitlink paths are relative to (real path)
	hashLen  int
}

// nestedStore keeps, per index, the gitlinks of its last read (a cache keyed by the
// index's identity: an exec in an unchanged repository reads no index) and the baseline:
// the gitlinks whose .git existed when a launch read that index with no run active on it.
type nestedStore struct {
	mu      sync.Mutex
	indexes map[string]*storedIndex
	// active counts, per index, the runs between their launch and the end of their check.
	active map[string]int
}

type storedIndex struct {
	id       gitFileID
	gitlinks []string
	base     map[string]gitFileID // gitlink path -> its .git at first sight
}

func newNestedStore() *nestedStore {
	return &nestedStore{indexes: map[string]*storedIndex{}, active: map[string]int{}}
}

// gitlinks are the (clean, deduplicated) gitlink paths of c's index; none when there is no
// index. refused are paths of the index git's verify_path refuses (gitindex.VerifyPath),
// which the user's git checkout would write all the same; an index with any is never
// cached. A nil store reads every time.
func (s *nestedStore) gitlinks(c *indexedCheckout) (links, refused []string, _ error) {
	var cached []string
	b, st, err := readIndexFile(c.index, func(st *unix.Stat_t) bool {
		if s == nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if si := s.indexes[c.index]; si != nil && si.gitlinks != nil && si.id == idOf(st, true) {
			cached = si.gitlinks
			return true
		}
		return false
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if cached != nil {
		return cached, nil, nil
	}
	id := idOf(&st, true)
	links, refused, split, err := parseGitlinks(b, c)
	if err != nil {
		return nil, nil, err
	}
	// A split index's shared part can change with the index unchanged: never cached.
	if s != nil && !split && len(refused) == 0 {
		s.mu.Lock()
		if si := s.indexes[c.index]; si != nil {
			si.id, si.gitlinks = id, links
		} else if len(s.indexes) < maxBaselines {
			s.indexes[c.index] = &storedIndex{id: id, gitlinks: links}
		}
		s.mu.Unlock()
	}
	return links, refused, nil
}

// baseline counts a run as active on index from its launch until release, and takes
// present (the gitlinks that have a .git now) as the index's baseline when no run is
// active on it: each run's changes are checked when it ends, so with none running what is
// there is what the runs left after their checks, or what the user made meanwhile (a
// git submodule update in another terminal), not something to move aside. While a run is
// active the baseline stays: that is what stops two runs from handing a repository to
// each other.
func (s *nestedStore) baseline(index string, present map[string]gitFileID) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	si := s.indexes[index]
	if si == nil {
		if len(s.indexes) >= maxBaselines {
			s.active[index]++
			return
		}
		si = &storedIndex{}
		s.indexes[index] = si
	}
	if si.base == nil || s.active[index] == 0 {
		si.base = present
	}
	s.active[index]++
}

// release ends the runs' hold on the checkouts' indexes (baseline).
func (s *nestedStore) release(checkouts []*indexedCheckout) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range checkouts {
		if s.active[c.index]--; s.active[c.index] <= 0 {
			delete(s.active, c.index)
		}
	}
}

// known: the .git of gitlink at id was in index's baseline.
func (s *nestedStore) known(index, gitlink string, id gitFileID) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	si := s.indexes[index]
	if si == nil || si.base == nil {
		return false
	}
	b, ok := si.base[gitlink]
	return ok && b == id
}

// readIndexFile opens the index (following a symlink, as git does, but never blocking on
// a FIFO put in its place) and reads it, bounded, with the identity it had when opened;
// it reads nothing when known (nil: never) says the identity is one already read.
func readIndexFile(p string, known func(*unix.Stat_t) bool) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	// O_NOFOLLOW: the index is the run's to replace, and fledge follows no symlink a plugin
	// planted (ELOOP: an index fledge cannot check, moved aside or refused as such).
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, st, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, st, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, st, fmt.Errorf("%w: index %s is not a regular file", errGitProtect, p)
	}
	if st.Size > maxIndexBytes {
		return nil, st, fmt.Errorf("%w: index %s is %d bytes, more than the %d fledge reads (it refuses to run rather than leave a nested repository unprotected)", errGitProtect, p, st.Size, maxIndexBytes)
	}
	if known != nil && known(&st) {
		return nil, st, nil
	}
	// Sized from the stat (a file growing meanwhile is read up to the bound, no further).
	buf := bytes.NewBuffer(make([]byte, 0, st.Size+512))
	if _, err := buf.ReadFrom(io.LimitReader(f, maxIndexBytes+1)); err != nil {
		return nil, st, err
	}
	b := buf.Bytes()
	if len(b) > maxIndexBytes {
		return nil, st, fmt.Errorf("%w: index %s is more than %d bytes", errGitProtect, p, maxIndexBytes)
	}
	return b, st, nil
}

// parseGitlinks reads the gitlinks of the index b (and of its shared index, when split),
// and the paths of either that git's verify_path refuses.
func parseGitlinks(b []byte, c *indexedCheckout) (_, refused []string, split bool, _ error) {
	idx, err := gitindex.Parse(b, c.hashLen, maxIndexEntries, false)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: index %s: %w (fledge refuses to run rather than leave a nested repository unprotected; to repair it, move the index aside and run git reset)", errGitProtect, c.index, err)
	}
	links := idx.Gitlinks
	refused = idx.Refused
	if idx.SharedIndex != "" {
		if _, err := hex.DecodeString(idx.SharedIndex); err != nil {
			return nil, nil, false, fmt.Errorf("%w: index %s names a shared index %q", errGitProtect, c.index, idx.SharedIndex)
		}
		for _, gd := range c.gitDirs {
			sp := filepath.Join(gd, "sharedindex."+idx.SharedIndex)
			if sb, _, err := readIndexFile(sp, nil); !errors.Is(err, os.ErrNotExist) {
				if err != nil {
					return nil, nil, false, err
				}
				// A gitlink that replaced a shared entry carries no path: every shared path
				// may be one (a .git there is what counts).
				shared, err := gitindex.Parse(sb, c.hashLen, maxIndexEntries, idx.StrippedGitlink)
				if err != nil {
					return nil, nil, false, fmt.Errorf("%w: shared index %s: %w", errGitProtect, sp, err)
				}
				links = append(append(links, shared.Gitlinks...), shared.Paths...)
				refused = append(refused, shared.Refused...)
				break
			}
		}
	}
	seen := map[string]bool{}
	out := []string{}
	for _, l := range links {
		// git reads a name with a NUL inside as the C string before it (such an index
		// has a refused path, but its gitlinks are checked all the same).
		if i := strings.IndexByte(l, 0); i >= 0 {
			l = l[:i]
		}
		l = path.Clean(l)
		if l == "." || seen[l] {
			continue
		}
		if len(out) >= maxGitlinks {
			return nil, nil, false, fmt.Errorf("%w: index %s has more than %d gitlinks (fledge refuses to run rather than leave a nested repository unprotected)", errGitProtect, c.index, maxGitlinks)
		}
		seen[l] = true
		out = append(out, l)
	}
	return out, refused, idx.SharedIndex != "", nil
}

// nested protects the git directory of every gitlink of the checkout worktree, whose
// index lies in gd (a linked worktree's: common is where its shared index may lie too),
// and remembers the checkout for the check after the run.
func (g *gitProtector) nested(gd, common, worktree string, hashLen, depth int) error {
	if worktree == "" || !g.touches(worktree) {
		return nil
	}
	c := &indexedCheckout{index: filepath.Join(gd, "index"), gitDirs: []string{gd}, checkout: worktree, hashLen: hashLen}
	if common != "" {
		c.gitDirs = append(c.gitDirs, common)
	}
	links, refused, err := g.store.gitlinks(c)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		// As an index fledge cannot read: the run is refused, not the index moved aside
		// under the user's feet before anything ran.
		return fmt.Errorf("%w: index %s records the path %q, which git refuses to add (a .git element, \"..\", an empty element): the user's git checkout would write it, into .git or out of the checkout (fledge refuses to run; to repair it, move the index aside and run git reset)", errGitProtect, c.index, refused[0])
	}
	present := map[string]gitFileID{}
	for _, l := range links {
		sub := filepath.Join(worktree, l)
		dotgit := filepath.Join(sub, ".git")
		root, rel, err := g.beneath(dotgit)
		if err != nil {
			continue // not in a writable root: nothing a run could make there
		}
		st, err := safefs.Lstat(root, rel)
		if err != nil {
			continue // none, or a symlink on the way (git does not recurse through one)
		}
		present[l] = idOf(&st, false)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = g.gitDir(dotgit, sub, depth+1)
		case unix.S_IFREG:
			err = g.gitFile(dotgit, sub, depth+1)
		default:
			err = g.add(dotgit) // a symlink: refused unless unprotected
		}
		if err != nil {
			return err
		}
	}
	g.store.baseline(c.index, present)
	g.checkouts = append(g.checkouts, c) // held until released (the run's end)
	return nil
}

// hashLen is the object hash length of a repository with config c.
func hashLen(c gitConfig) int {
	if c.objectFormat == "sha256" {
		return 32
	}
	return 20
}

// quarantineNested looks again, after a run, at every gitlink of the checkouts its launch
// read, and renames aside each .git that is not in the baseline (see the top of this
// file). roots are the run's writable roots; unprotect its opt-outs.
func (s *nestedStore) quarantineNested(checkouts []*indexedCheckout, roots, unprotect []string) []sandbox.Quarantine {
	var out []sandbox.Quarantine
	now := strconv.FormatInt(time.Now().Unix(), 10)
	g := &gitProtector{}
	for _, r := range roots {
		real, err := filepath.EvalSymlinks(r)
		if err != nil {
			real = filepath.Clean(r)
		}
		g.roots = append(g.roots, protRoot{view: r, real: real})
	}
	for _, c := range checkouts {
		links, refused, err := s.gitlinks(c)
		if err != nil {
			// Not readable as an index any more (grown past the bounds, garbled, a FIFO):
			// git may read it all the same, so it goes aside and git sees an empty one.
			out = append(out, g.quarantine(c.index, c.checkout, now, "the index cannot be checked: "+err.Error()))
			continue
		}
		for _, l := range links {
			dotgit := filepath.Join(c.checkout, l, ".git")
			root, rel, err := g.beneath(dotgit)
			if err != nil || sandbox.Unprotected(filepath.ToSlash(rel), unprotect) {
				continue
			}
			st, err := safefs.Lstat(root, rel)
			if err != nil || s.known(c.index, l, idOf(&st, false)) {
				continue
			}
			out = append(out, g.quarantine(dotgit, c.checkout, now, "a nested git repository recorded as a gitlink in the index was made or replaced by the run: git status would run its config"))
		}
		if len(refused) > 0 {
			// git checkout -- . (or git restore .) would write the path wherever it
			// leads, .git/hooks included: the index goes aside as an unreadable one.
			// Its gitlinks were checked above all the same, should the user put it back.
			out = append(out, g.quarantine(c.index, c.checkout, now, fmt.Sprintf("the index records the path %q, which git refuses to add (a .git element, \"..\", an empty element): git checkout would write it into .git or out of the checkout", refused[0])))
		}
	}
	return out
}

// quarantine renames p (in a writable root) to p.fledge-quarantine-<now>.
func (g *gitProtector) quarantine(p, checkout, now, why string) sandbox.Quarantine {
	q := sandbox.Quarantine{Path: p, Repository: checkout, Why: why}
	root, rel, err := g.beneath(p)
	if err == nil {
		to := filepath.Base(p) + quarantineSuffix + now
		if err = safefs.RenameNoReplace(root, rel, to); err == nil {
			q.MovedTo = filepath.Join(filepath.Dir(p), to)
			return q
		}
	}
	q.Err = err.Error()
	return q
}
