// SPDX-License-Identifier: MIT

package linux

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
)

// The default protection of git metadata: an allow-list, not a list of what git reads.
//
// In every git directory found in a writable root (a repository's .git, a bare
// repository, a submodule's modules/<name>, a linked worktree's worktrees/<id>), only the
// top-level entries git writes in ordinary work (sandbox.GitWrites: objects, refs, logs, the
// index, HEAD and the other *_HEAD files, packed-refs, shallow, lock files, rebase,
// merge, sequencer and bisect state, ...) stay writable. Every other entry that exists is
// bound read-only: config, config.worktree, hooks, info, description, branches, remotes,
// commondir, gitdir, modules, and any name fledge does not know, so a file git reads
// that this list forgot is protected by default rather than open by default.
//
// A mount cannot stop a name from being created in a writable directory, and git must
// create and rename files at the top level of its git directory (index.lock -> index,
// ORIG_HEAD, MERGE_HEAD...), so that directory stays writable. The names git reads there
// to find code to run, or a git directory to take it from, are made to exist before the
// run, in the form git reads as "nothing there", and then bound read-only like the rest:
//
//   - hooks: an empty directory;
//   - config and config.worktree: empty files (an empty config is what git reads when
//     there is none; config.worktree counts once extensions.worktreeConfig is on, which
//     git sparse-checkout turns on by itself);
//   - commondir (not in a linked worktree's directory, which has one): a file holding
//     ".", which git reads as "the common directory is this one", what it assumes
//     without the file. A commondir naming another directory would make the user's git
//     take its config and hooks from there;
//   - modules: an empty directory, so no submodule git directory can be planted for a
//     name .gitmodules gives (git submodule update would take it as the clone).
//
// Every other name git reads at the top level is data, not code: info/attributes and
// info/exclude (attributes only pick filter and diff drivers a config defines, as the
// checkout's own .gitattributes can), branches/ and remotes/ (URLs; the ext:: transport
// is off by default), objects/info/alternates (more objects), shallow, packed-refs.
//
// Beneath the top level: the submodule git directories in modules/ are bound writable
// again on top of the read-only modules/ and protected the same way, so git works in an
// existing submodule but no new one can be made; worktrees/ stays writable (git worktree
// add makes worktrees/<id>), and each existing worktrees/<id> is protected the same way.
//
// Outside the git directories: the .git FILE of a worktree or submodule checkout (so it
// cannot be pointed at a planted git directory), the back-pointer .git file of each
// linked worktree that lies in a root, the directory core.hooksPath names (husky's
// .husky/_) and files the config includes, when they lie in a writable root. Directories
// between a writable root and a protected path are pinned (made mount points of their
// own), so none can be renamed aside and replaced by a copy holding a planted hook: a
// repository's .git cannot be moved away and replaced by a .git file or directory.
//
// Only what lies inside a writable root is protected: elsewhere the view is read-only or
// the path does not exist. Paths are worked out on resolved (symlink-free) paths and
// reported as the view spells them under the root they lie in. [sandbox] unprotect opts
// a path out (fledge then neither protects nor creates it).

// Bounds of the walk. A malicious repository can hold any number of modules; past a bound
// the launch fails closed (sandbox.ErrLaunch naming the bound) rather than leave some
// git directory writable.
const (
	// maxGitDirs is how many git directories (repositories, linked worktrees, submodules)
	// one launch protects.
	maxGitDirs = 256
	// maxModuleDepth is how many directory levels below a modules/ directory are searched
	// for submodule git directories (a module name may contain /, and modules nest).
	maxModuleDepth = 16
	// maxGitEntries is how many directory entries of modules/ and worktrees/ directories
	// one launch reads.
	maxGitEntries = 8192
	// maxScanDepth and maxScanDirs bound the search for repositories below a writable
	// root (see scan): its direct subdirectories, 512 looked at per launch. The search runs
	// on every launch: two levels (a node_modules of 3000 packages) cost 42 ms an exec.
	maxScanDepth = 1
	maxScanDirs  = 512
	// maxLockDepth and maxLockDirs bound the search for fledge.lock (sandbox.ProtectedFiles)
	// below a writable root, beyond the repository search: a monorepo's sub-project
	// (services/api/fledge.lock) is where `plugins sync` run in it reads its lock.
	// node_modules, .git and hidden directories are not entered.
	maxLockDepth = 3
	maxLockDirs  = 512
	// maxGitFileBytes is how much of a .git file, commondir, gitdir or config is read.
	maxGitFileBytes = 1 << 20
)

// errGitProtect is a repository whose git metadata cannot all be protected.
var errGitProtect = errors.New("cannot protect git metadata")

type protRoot struct{ view, real string }

type gitProtector struct {
	roots     []protRoot // outermost first
	unprotect []string
	seen      map[string]bool   // git directories walked (real paths)
	out       map[string]string // view path -> real path, to protect
	rw        map[string]string // view path -> real path, bound writable again (in out's)
	gitDirs   int
	entries   int
	store     *nestedStore       // gitlink cache and baselines (nil: none kept)
	checkouts []*indexedCheckout // checkouts whose index was read (gitnested_linux.go)
}

// gitProtection is what a launch mounts: Protected read-only, and Writable bound writable
// again on top of a read-only directory holding them (kernel.View).
type gitProtection struct {
	Protected []string
	Writable  []string
	// Checkouts are the checkouts in the writable roots whose index was read, looked at
	// again when the run ends (quarantineNested).
	Checkouts []*indexedCheckout
}

// defaultProtected is the default protected set of the writable roots, less what unprotect
// (sandbox.Access.Unprotect) opts out of (see defaultGitProtection).
func defaultProtected(roots, unprotect []string) ([]string, error) {
	p, err := defaultGitProtection(roots, unprotect)
	return p.Protected, err
}

// defaultGitProtection works out the protection of the writable roots' git metadata. It
// creates the placeholders (an empty hooks directory, config, config.worktree and
// modules/, a commondir of ".") where a git directory lacks them, so a command cannot
// create them.
func defaultGitProtection(roots, unprotect []string) (gitProtection, error) {
	return gitProtectionWith(roots, unprotect, nil)
}

// gitProtectionWith is defaultGitProtection keeping gitlinks and baselines in store.
func gitProtectionWith(roots, unprotect []string, store *nestedStore) (gitProtection, error) {
	g := &gitProtector{unprotect: unprotect, seen: map[string]bool{}, out: map[string]string{}, rw: map[string]string{}, store: store}
	for _, r := range roots {
		r = filepath.Clean(r)
		real, err := filepath.EvalSymlinks(r)
		if err != nil {
			real = r
		}
		g.roots = append(g.roots, protRoot{view: r, real: real})
	}
	sort.SliceStable(g.roots, func(i, j int) bool { return len(g.roots[i].real) < len(g.roots[j].real) })
	scanned := 0
	for _, r := range g.roots {
		if err := g.scan(r.real, 0, &scanned); err != nil {
			g.store.release(g.checkouts)
			return gitProtection{}, err
		}
	}
	lockDirs := 0
	for _, r := range g.roots {
		if err := g.scanLocks(r.real, 0, &lockDirs); err != nil {
			g.store.release(g.checkouts)
			return gitProtection{}, err
		}
	}
	p := gitProtection{Checkouts: g.checkouts}
	for v := range g.out {
		p.Protected = append(p.Protected, v)
	}
	for v := range g.rw {
		p.Writable = append(p.Writable, v)
	}
	sort.Strings(p.Protected)
	sort.Strings(p.Writable)
	return p, nil
}

// scan protects the repository at dir and those in its subdirectories, maxScanDepth levels
// down, looking at maxScanDirs subdirectories per launch (the roots themselves are always
// looked at): repositories in a writable root that is not one (a read_write directory of
// clones) are found too. Beyond those bounds the search stops; it is not an error, since a
// tree like node_modules must not refuse every run. docs/guarantees.md says so.
func (g *gitProtector) scan(dir string, depth int, scanned *int) error {
	if depth == 0 {
		// A writable root that is no directory (/dev/null, a granted file) holds no
		// repository: one stat instead of five lookups beneath it and an open of it.
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			return nil
		}
	}
	if isBareGitDir(dir) {
		// A bare repository (foo.git): its hooks run when the user pushes to it.
		return g.gitDir(dir, "", 0)
	}
	if err := g.worktree(dir); err != nil {
		return err
	}
	for _, n := range sandbox.ProtectedFiles {
		if err := g.add(filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	if depth >= maxScanDepth || *scanned >= maxScanDirs {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	ents, _ := f.ReadDir(maxScanDirs - *scanned)
	f.Close()
	for _, e := range ents {
		if !e.IsDir() || e.Name() == ".git" {
			continue
		}
		if *scanned >= maxScanDirs {
			return nil
		}
		*scanned++
		if err := g.scan(filepath.Join(dir, e.Name()), depth+1, scanned); err != nil {
			return err
		}
	}
	return nil
}

// scanLocks protects the files of sandbox.ProtectedFiles in dir and its subdirectories,
// maxLockDepth levels down, looking at maxLockDirs directories per launch; symlinks are not
// followed (a lock reached through one is refused by its reader).
func (g *gitProtector) scanLocks(dir string, depth int, scanned *int) error {
	if depth > 0 {
		for _, n := range sandbox.ProtectedFiles {
			if err := g.add(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	if depth >= maxLockDepth || *scanned >= maxLockDirs {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	ents, _ := f.ReadDir(maxLockDirs - *scanned)
	f.Close()
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "node_modules" || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if *scanned >= maxLockDirs {
			return nil
		}
		*scanned++
		if err := g.scanLocks(filepath.Join(dir, e.Name()), depth+1, scanned); err != nil {
			return err
		}
	}
	return nil
}

// worktree protects the repository whose checkout is dir (its .git directory, file or link).
func (g *gitProtector) worktree(dir string) error {
	dotgit := filepath.Join(dir, ".git")
	st, err := os.Lstat(dotgit)
	if err != nil {
		return nil // not a repository (or not one we can see)
	}
	switch {
	case st.IsDir():
		return g.gitDir(dotgit, dir, 0)
	case st.Mode()&os.ModeSymlink != 0:
		if err := g.add(dotgit); err != nil { // refused unless unprotected: the link can be replaced
			return err
		}
		gd, err := filepath.EvalSymlinks(dotgit)
		if err != nil {
			return nil
		}
		return g.gitDir(gd, dir, 0)
	case st.Mode().IsRegular():
		return g.gitFile(dotgit, dir, 0)
	}
	return nil
}

// gitFile protects a .git file and the git directory it names ("gitdir: <path>").
func (g *gitProtector) gitFile(file, worktree string, depth int) error {
	if err := g.add(file); err != nil {
		return err
	}
	b, err := readBounded(file)
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(b), "\n")
	target, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !ok {
		return nil // git refuses it too ("invalid gitfile format")
	}
	gd := resolveFrom(filepath.Dir(file), strings.TrimSpace(target))
	if gd == "" {
		return nil
	}
	if isFile(filepath.Join(gd, "commondir")) {
		return g.linkedWorktree(gd, worktree, depth)
	}
	return g.gitDir(gd, worktree, depth)
}

// gitDir protects a full git directory (one with its own config and hooks: a repository's
// .git, a submodule's modules/<name>, a --separate-git-dir, a bare repository), its linked
// worktrees and its submodules. worktree is its checkout ("" when bare or unknown).
func (g *gitProtector) gitDir(gd, worktree string, depth int) error {
	if g.seen[gd] {
		return nil
	}
	if err := g.count(gd); err != nil {
		return err
	}
	// Read before the placeholders exist, and before anything is protected.
	cfg := readGitConfig(filepath.Join(gd, "config"))
	wcfg := readGitConfig(filepath.Join(gd, "config.worktree"))
	if err := g.topLevel(gd, gitDirPlaces); err != nil {
		return err
	}
	if err := g.settings(gd, worktree, cfg, wcfg); err != nil {
		return err
	}
	if err := g.nested(gd, "", worktree, hashLen(cfg), depth); err != nil {
		return err
	}
	if err := g.eachDir(filepath.Join(gd, "worktrees"), func(wd string) error {
		return g.linkedWorktree(wd, "", depth)
	}); err != nil {
		return err
	}
	return g.modules(filepath.Join(gd, "modules"), depth)
}

// linkedWorktree protects a linked worktree's git directory (.git/worktrees/X): its
// top level as gitDir's (its commondir, gitdir and config.worktree read-only), the .git
// file of its checkout (from its gitdir file, when worktree is not known), its
// submodules, and the common git directory.
func (g *gitProtector) linkedWorktree(wd, worktree string, depth int) error {
	if g.seen[wd] {
		return nil
	}
	if err := g.count(wd); err != nil {
		return err
	}
	if worktree == "" {
		if b, err := readBounded(filepath.Join(wd, "gitdir")); err == nil {
			if back := resolveFrom(wd, strings.TrimSpace(string(b))); back != "" && isFile(back) {
				worktree = filepath.Dir(back)
				if err := g.add(back); err != nil {
					return err
				}
			}
		}
	}
	var common string
	if b, err := readBounded(filepath.Join(wd, "commondir")); err == nil {
		common = resolveFrom(wd, strings.TrimSpace(string(b)))
	}
	var ccfg gitConfig
	if common != "" {
		ccfg = readGitConfig(filepath.Join(common, "config"))
	}
	wcfg := readGitConfig(filepath.Join(wd, "config.worktree"))
	if err := g.topLevel(wd, linkedPlaces); err != nil {
		return err
	}
	if err := g.settings(wd, worktree, ccfg, wcfg); err != nil {
		return err
	}
	if err := g.nested(wd, common, worktree, hashLen(ccfg), depth); err != nil {
		return err
	}
	if err := g.modules(filepath.Join(wd, "modules"), depth); err != nil {
		return err
	}
	if common != "" {
		main := ""
		if filepath.Base(common) == ".git" {
			main = filepath.Dir(common)
		}
		return g.gitDir(common, main, depth)
	}
	return nil
}

// modules protects the submodule git directories under dir (a modules/ directory, itself
// read-only): a directory holding HEAD is one, bound writable again on top; any other is
// a level of a module name with / in it, and stays read-only.
func (g *gitProtector) modules(dir string, depth int) error {
	return g.eachDir(dir, func(sub string) error {
		if !isFile(filepath.Join(sub, "HEAD")) {
			if depth+1 > maxModuleDepth {
				return fmt.Errorf("%w: %s is more than %d directories deep below modules/ (fledge searches no deeper, and refuses to run rather than leave a submodule's hooks writable; [sandbox] unprotect can opt out)", errGitProtect, sub, maxModuleDepth)
			}
			return g.modules(sub, depth+1)
		}
		worktree := ""
		if wt := readGitConfig(filepath.Join(sub, "config")).worktree; wt != "" {
			if worktree = resolveFrom(sub, wt); worktree != "" {
				if dotgit := filepath.Join(worktree, ".git"); isFile(dotgit) {
					if err := g.add(dotgit); err != nil {
						return err
					}
				}
			}
		}
		if err := g.writable(sub); err != nil {
			return err
		}
		return g.gitDir(sub, worktree, depth+1)
	})
}

// topLevel protects every entry at the top level of the git directory gd that git does not
// write in ordinary work (sandbox.GitWrites), whatever its name, after making the
// placeholders (places) it lacks.
func (g *gitProtector) topLevel(gd string, places []place) error {
	if !g.touches(gd) {
		return nil // nothing of it lies in a writable root
	}
	f, err := os.Open(gd)
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[string]bool{}
	for {
		ents, err := f.ReadDir(64)
		g.entries += len(ents)
		if g.entries > maxGitEntries {
			return fmt.Errorf("%w: more than %d entries in git directories, at %s: fledge refuses to run rather than leave some git metadata writable", errGitProtect, maxGitEntries, gd)
		}
		for _, e := range ents {
			seen[e.Name()] = true
			if sandbox.GitWrites(e.Name()) {
				continue
			}
			if err := g.addEntry(filepath.Join(gd, e.Name()), e.Type()); err != nil {
				return err
			}
		}
		if err != nil {
			break // io.EOF or unreadable: what was read is done
		}
	}
	for _, pl := range places {
		if seen[pl.name] {
			continue
		}
		p := filepath.Join(gd, pl.name)
		if g.placeholder(p, pl.kind) {
			if err := g.add(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// touches: dir lies in a writable root, or a writable root lies in it.
func (g *gitProtector) touches(dir string) bool {
	for _, r := range g.roots {
		if _, ok := under(r.real, dir); ok {
			return true
		}
		if _, ok := under(dir, r.real); ok {
			return true
		}
	}
	return false
}

// settings protects what a git directory's config points at inside the writable roots:
// the core.hooksPath directory and included files.
func (g *gitProtector) settings(gd, worktree string, cfgs ...gitConfig) error {
	for _, c := range cfgs {
		if !sandbox.UnprotectsSetting(g.unprotect, sandbox.UnprotectHooksPath) {
			for _, hp := range c.hooksPath {
				// A relative hooksPath is relative to where hooks run: the checkout's top
				// (the git directory itself when bare).
				base := worktree
				if base == "" {
					base = gd
				}
				if p := resolveFrom(base, hp); p != "" {
					if err := g.hooks(p); err != nil {
						return err
					}
				}
			}
		}
		if !sandbox.UnprotectsSetting(g.unprotect, sandbox.UnprotectIncludes) {
			for _, inc := range c.includes {
				// Relative include paths are relative to the including file (in gd).
				if p := resolveFrom(gd, inc); p != "" {
					if err := g.add(p); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func (g *gitProtector) count(gd string) error {
	g.seen[gd] = true
	g.gitDirs++
	if g.gitDirs > maxGitDirs {
		return fmt.Errorf("%w: more than %d git directories (repositories, worktrees, submodules) in the writable roots, at %s: fledge refuses to run rather than leave some hooks writable ([sandbox] unprotect can opt out)", errGitProtect, maxGitDirs, gd)
	}
	return nil
}

// eachDir calls fn for every directory in dir (none when it does not exist), within the
// entry budget.
func (g *gitProtector) eachDir(dir string, fn func(string) error) error {
	// Git directories outside the roots are walked too: a submodule's checkout (its .git
	// file) can lie in a root while its git directory does not.
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(64)
		g.entries += len(ents)
		if g.entries > maxGitEntries {
			return fmt.Errorf("%w: more than %d entries in worktrees/ and modules/ directories, at %s: fledge refuses to run rather than leave some hooks writable", errGitProtect, maxGitEntries, dir)
		}
		for _, e := range ents {
			if e.IsDir() {
				if err := fn(filepath.Join(dir, e.Name())); err != nil {
					return err
				}
			}
		}
		if err != nil {
			return nil // io.EOF or unreadable: what was read is done
		}
	}
}

// What a placeholder is made as.
type placeKind int

const (
	placeDir   placeKind = iota // an empty directory
	placeEmpty                  // an empty file
	placeSelf                   // a commondir naming its own directory
)

type place struct {
	name string
	kind placeKind
}

// The placeholders: the names git reads code (or a git directory to take it from) from,
// in the form git reads as nothing there. A linked worktree's directory has its commondir
// (its hooks and config are the common directory's).
var (
	gitDirPlaces = []place{{"hooks", placeDir}, {"config", placeEmpty}, {"config.worktree", placeEmpty},
		{"commondir", placeSelf}, {"modules", placeDir}}
	linkedPlaces = []place{{"config.worktree", placeEmpty}, {"modules", placeDir}}
)

// placeholder makes p (missing in a git directory in a writable root, not opted out) in
// the form git reads as nothing there, and says whether it did. A failure leaves p
// missing, which a command could then create: it is not expected (the git directory is
// writable for whoever runs fledge), and the next launch tries again.
func (g *gitProtector) placeholder(p string, kind placeKind) bool {
	if _, ok := g.viewOf(p); !ok || g.unprotected(p) {
		return false
	}
	// Made beneath the writable root without following a symlink: a command of the same
	// plugin may swap a directory on the way for a link while fledge (often root) creates.
	switch kind {
	case placeDir:
		return g.mkdirBeneath(p, 0o755) == nil
	case placeSelf:
		// A commondir git cannot read stops git; an empty one is no better.
		return g.createBeneath(p, 0o644, ".\n") == nil
	default:
		return g.createBeneath(p, 0o644, "") == nil
	}
}

// hooks protects a hooks directory outside a git directory (core.hooksPath), making an
// empty one first when it is missing.
func (g *gitProtector) hooks(p string) error {
	if _, ok := g.viewOf(p); !ok || g.unprotected(p) {
		return nil
	}
	if err := g.mkdirBeneath(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil // no parent (a hooksPath into nowhere): git finds no hooks there either
	}
	return g.add(p)
}

// writable binds the directory p (a submodule git directory inside a read-only modules/)
// writable again, when it lies in a writable root. Unprotect does not apply: this grants.
func (g *gitProtector) writable(p string) error {
	view, ok := g.viewOf(p)
	if !ok {
		return nil
	}
	st, err := os.Lstat(p)
	if err != nil || !st.IsDir() {
		return nil
	}
	g.rw[view] = p
	return nil
}

// add protects p when it exists in a writable root and is not opted out. A symlink cannot
// be: the bind would follow it and the link itself could be replaced, so it is an error.
func (g *gitProtector) add(p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return nil // nothing to protect (and nothing git reads)
	}
	return g.addEntry(p, st.Mode().Type())
}

// addEntry is add of p, known to exist with type typ (from its directory's entries).
func (g *gitProtector) addEntry(p string, typ os.FileMode) error {
	view, ok := g.viewOf(p)
	if !ok || g.unprotected(p) {
		return nil
	}
	if typ&os.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symlink, which a read-only mount cannot keep (the link itself could be replaced): make it a real file or directory, or add it to [sandbox] unprotect", errGitProtect, view)
	}
	g.out[view] = p
	return nil
}

// viewOf is p's path in the view: under the outermost writable root holding it.
func (g *gitProtector) viewOf(p string) (string, bool) {
	for _, r := range g.roots {
		if rel, ok := under(r.real, p); ok {
			return filepath.Join(r.view, rel), true
		}
	}
	return "", false
}

// unprotected: p, relative to some writable root holding it, matches an Unprotect entry.
func (g *gitProtector) unprotected(p string) bool {
	for _, r := range g.roots {
		if rel, ok := under(r.real, p); ok && rel != "." && sandbox.Unprotected(filepath.ToSlash(rel), g.unprotect) {
			return true
		}
	}
	return false
}

// under is p relative to root when p lies inside it.
func under(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// pinsFor are the directories between each protected path and the outermost writable root
// holding it, parents first: each becomes a mount point, so none can be renamed aside
// (with the protected paths in it) and replaced by a copy with a planted hook.
func pinsFor(protected, roots []string) []string {
	set := map[string]bool{}
	for _, p := range protected {
		p = filepath.Clean(p)
		root := ""
		for _, r := range roots {
			r = filepath.Clean(r)
			if _, ok := under(r, p); ok && (root == "" || len(r) < len(root)) {
				root = r
			}
		}
		if root == "" {
			continue
		}
		for a := filepath.Dir(p); a != root && len(a) > len(root); a = filepath.Dir(a) {
			set[a] = true
		}
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// resolveFrom resolves a path a git file names (relative to base), symlinks and all; ""
// when it does not exist.
func resolveFrom(base, p string) string {
	if p == "" || strings.HasPrefix(p, "~") {
		return "" // ~/ is the user's home: not a writable root of a confined run
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		// A hooksPath that does not exist yet: its parent may (hooks then creates it).
		if parent, perr := filepath.EvalSymlinks(filepath.Dir(p)); perr == nil {
			return filepath.Join(parent, filepath.Base(p))
		}
		return ""
	}
	return real
}

// isBareGitDir: dir has what git's own discovery checks for a git directory (HEAD, objects/,
// refs/).
func isBareGitDir(dir string) bool {
	// HEAD first: most directories scanned have none, and each lstat is a system call on
	// every launch.
	if !isFile(filepath.Join(dir, "HEAD")) {
		return false
	}
	obj, err1 := os.Lstat(filepath.Join(dir, "objects"))
	refs, err2 := os.Lstat(filepath.Join(dir, "refs"))
	return err1 == nil && obj.IsDir() && err2 == nil && refs.IsDir()
}

func isFile(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().IsRegular()
}

// readBounded reads at most maxGitFileBytes of the regular file p. The files it reads lie
// in roots a run writes: O_NONBLOCK and the type check on the opened descriptor keep a
// FIFO (or a device) planted there from blocking every later launch in open(2) or read(2).
func readBounded(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: %s is not a regular file", errGitProtect, p)
	}
	return io.ReadAll(io.LimitReader(f, maxGitFileBytes))
}

// gitConfig is what the walk needs of a git config file.
type gitConfig struct {
	worktree  string   // core.worktree
	hooksPath []string // core.hooksPath (every value seen)
	includes  []string // include.path, includeIf.*.path
	// objectFormat is extensions.objectFormat (sha1 when unset): the hash length in the index.
	objectFormat string
}

// readGitConfig reads the settings the walk follows. It is deliberately lenient and errs
// towards protecting more: every value of a key counts, and a read error gives nothing.
func readGitConfig(p string) gitConfig {
	var c gitConfig
	b, err := readBounded(p)
	if err != nil {
		return c
	}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxGitFileBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			head := line[1:end]
			name, sub, quoted := strings.Cut(head, " ")
			section = strings.ToLower(name)
			if quoted && strings.ToLower(name) == "includeif" {
				section = "includeif"
			} else if quoted {
				section = strings.ToLower(name) + " " + strings.TrimSpace(sub)
			}
			line = strings.TrimSpace(line[end+1:])
			if line == "" {
				continue
			}
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		key, val, _ := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		val = unquote(strings.TrimSpace(val))
		switch {
		case section == "core" && key == "worktree":
			c.worktree = val
		case section == "core" && key == "hookspath":
			c.hooksPath = append(c.hooksPath, val)
		case section == "extensions" && key == "objectformat":
			c.objectFormat = strings.ToLower(val)
		case (section == "include" || section == "includeif") && key == "path":
			c.includes = append(c.includes, val)
		}
	}
	return c
}

func unquote(v string) string {
	if i := strings.IndexAny(v, "#;"); i >= 0 && !strings.HasPrefix(v, "\"") {
		v = strings.TrimSpace(v[:i])
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	return v
}
