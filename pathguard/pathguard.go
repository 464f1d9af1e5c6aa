// SPDX-License-Identifier: MIT

// Package pathguard resolves a plugin's requested working directory inside a fixed set of
// allowed roots and hands back an open directory handle, never a path string to re-resolve.
//
// The guard is the kernel, not string checks: on Linux each lookup is one
// openat2(rootfd, rel, RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS); where openat2 is missing or
// forbidden (seccomp), and on other systems, os.Root walks the path one component at a time
// from the root's fd. Lexical checks only reject obviously bad input early and pick the words
// of an error; they never decide that a path is safe.
//
// Symbolic links are followed while they stay beneath the root. Absolute symbolic links are
// refused even when they point back inside the root: RESOLVE_BENEATH and os.Root both refuse
// them, and rewriting them would mean re-resolving a path string.
package pathguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// MaxRequestLen is the longest request accepted, in bytes (PATH_MAX on Linux).
const MaxRequestLen = 4096

// maxSymlinks bounds the diagnostic walk (the kernel's own limit is 40).
const maxSymlinks = 40

// Sentinel errors. Every *Error matches ErrRefused; the others are what New and Verify wrap.
var (
	// ErrRefused is matched by every *Error: the requested directory must not be used.
	ErrRefused = errors.New("cwd refused")
	// ErrNoRoots is returned by New without roots.
	ErrNoRoots = errors.New("pathguard: no roots")
	// ErrBadRoot is returned by New for a root that cannot confine anything ("/", not a dir).
	ErrBadRoot = errors.New("pathguard: unusable root")
	// ErrMismatch is wrapped by Verify when the handle is not the directory that was resolved.
	ErrMismatch = errors.New("directory changed since it was resolved")
	// ErrClosed is wrapped when Resolve is called after Close.
	ErrClosed = errors.New("pathguard: guard closed")
	// ErrBusy is wrapped when the kernel kept reporting concurrent renames (EAGAIN).
	ErrBusy = errors.New("pathguard: path kept changing during resolution")
	// ErrUnsupported is returned by New where no directory can be resolved beneath a root by
	// handle (every OS but the unix ones).
	ErrUnsupported = errors.New("pathguard: not supported on this OS")
)

// Reason says why a request was refused. The values are stable; they land in audit records.
type Reason string

const (
	ReasonOutsideRoots  Reason = "outside_roots"
	ReasonDotDotEscape  Reason = "dotdot_escape"
	ReasonSymlinkEscape Reason = "symlink_escape"
	ReasonMagicLink     Reason = "magic_link"
	ReasonNULByte       Reason = "nul_byte"
	ReasonTooLong       Reason = "too_long"
	ReasonNotDirectory  Reason = "not_directory"
	ReasonNotFound      Reason = "not_found"
	ReasonInvalid       Reason = "invalid"
)

// Reasons lists every reason, for docs and tests.
var Reasons = []Reason{
	ReasonOutsideRoots, ReasonDotDotEscape, ReasonSymlinkEscape, ReasonMagicLink,
	ReasonNULByte, ReasonTooLong, ReasonNotDirectory, ReasonNotFound, ReasonInvalid,
}

var reasonWords = map[Reason]string{
	ReasonOutsideRoots:  "absolute path outside every allowed directory",
	ReasonDotDotEscape:  `".." climbs out of the allowed directory`,
	ReasonSymlinkEscape: "a symbolic link leads out of the allowed directory",
	ReasonMagicLink:     "a /proc magic link is not allowed",
	ReasonNULByte:       "the path contains a NUL byte",
	ReasonTooLong:       "the path is too long",
	ReasonNotDirectory:  "not a directory",
	ReasonNotFound:      "no such directory",
	ReasonInvalid:       "the directory cannot be used",
}

// Valid reports whether r is one of Reasons.
func (r Reason) Valid() bool { _, ok := reasonWords[r]; return ok }

// Words is the reason in plain words, for stderr and the terminal.
func (r Reason) Words() string {
	if w, ok := reasonWords[r]; ok {
		return w
	}
	return string(r)
}

// Error is a refused request. errors.Is(err, ErrRefused) holds for every *Error.
type Error struct {
	Reason  Reason
	Request string
	Detail  string
	Err     error
}

// maxShownRequest bounds how much of a request an error message repeats.
const maxShownRequest = 256

func (e *Error) Error() string {
	req := e.Request
	if len(req) > maxShownRequest {
		req = req[:maxShownRequest] + fmt.Sprintf("...(%d bytes)", len(e.Request))
	}
	msg := fmt.Sprintf("cwd %q refused: %s (%s)", req, e.Reason.Words(), e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes every *Error match ErrRefused.
func (e *Error) Is(target error) bool { return target == ErrRefused }

func refuse(r Reason, req, detail string, err error) *Error {
	return &Error{Reason: r, Request: req, Detail: detail, Err: err}
}

// Dir is a directory proven to be beneath one of the guard's roots. File is an open handle
// (O_PATH on Linux) meant for fchdir in the child; it can go into exec.Cmd.ExtraFiles.
type Dir struct {
	File *os.File
	// Path is the absolute display path, spelled under Root (for messages and audit only).
	Path string
	// Root is the configured root the directory was found under.
	Root     string
	Dev, Ino uint64
}

// Close closes the handle.
func (d *Dir) Close() error {
	if d == nil || d.File == nil {
		return nil
	}
	return d.File.Close()
}

// root is one allowed directory, opened once.
type root struct {
	path     string   // absolute and clean, as configured
	real     string   // symlinks resolved, to match absolute requests that use the real path
	dev, ino uint64   // of the opened directory
	r        *os.Root // fallback resolver and diagnostics
	//lint:ignore U1000 empty outside Linux; Linux keeps its O_PATH fd here
	rootSys // per-OS handle (the O_PATH fd on Linux; nothing elsewhere)
}

// Guard holds the allowed roots. It is safe for concurrent use.
type Guard struct {
	mu     sync.RWMutex
	closed bool
	roots  []*root
	//lint:ignore U1000 empty outside Linux; Linux keeps its openat2 fallback switch here
	guardSys // per-OS state (Linux: whether openat2 fell back to os.Root)
}

// New opens each root once. roots[0] is the base for relative requests (the project root, or
// the plugin dir when there is no project). A root may be a symlink; it is followed once, here.
func New(roots ...string) (*Guard, error) {
	if len(roots) == 0 {
		return nil, ErrNoRoots
	}
	g := &Guard{}
	for _, p := range roots {
		rt, err := openRoot(p)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.roots = append(g.roots, rt)
	}
	return g, nil
}

func openRoot(p string) (*root, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return nil, fmt.Errorf("%w: %q", ErrBadRoot, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadRoot, p, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadRoot, p, err)
	}
	// A root of "/" would confine nothing.
	if abs == string(filepath.Separator) || real == string(filepath.Separator) {
		return nil, fmt.Errorf("%w: %q is the filesystem root", ErrBadRoot, p)
	}
	rt := &root{path: abs, real: real}
	if err := openRootSys(rt); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadRoot, p, err)
	}
	return rt, nil
}

// Close releases the roots. Resolve fails afterwards; Close is idempotent.
func (g *Guard) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	for _, rt := range g.roots {
		errs = append(errs, closeRootSys(rt))
		if rt.r != nil {
			errs = append(errs, rt.r.Close())
		}
	}
	return errors.Join(errs...)
}

// Roots returns the configured roots as absolute paths, roots[0] first.
func (g *Guard) Roots() []string {
	out := make([]string, len(g.roots))
	for i, rt := range g.roots {
		out[i] = rt.path
	}
	return out
}

// Resolve opens req beneath a root. A relative req (or "" or ".") is taken from roots[0]; an
// absolute req is tried against every root whose path it lexically sits under.
func (g *Guard) Resolve(req string) (*Dir, error) {
	if strings.IndexByte(req, 0) >= 0 {
		return nil, refuse(ReasonNULByte, req, "", nil)
	}
	if len(req) > MaxRequestLen {
		return nil, refuse(ReasonTooLong, req, fmt.Sprintf("%d bytes, limit %d", len(req), MaxRequestLen), nil)
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return nil, refuse(ReasonInvalid, req, "", ErrClosed)
	}
	type candidate struct {
		rt  *root
		rel string
	}
	var cands []candidate
	if !filepath.IsAbs(req) {
		rel := req
		if rel == "" {
			rel = "."
		}
		cands = append(cands, candidate{g.roots[0], rel})
	} else {
		for _, rt := range g.roots {
			if rel, ok := underRoot(req, rt.path); ok {
				cands = append(cands, candidate{rt, rel})
			} else if rel, ok := underRoot(req, rt.real); ok {
				cands = append(cands, candidate{rt, rel})
			}
		}
		if len(cands) == 0 {
			return nil, refuse(ReasonOutsideRoots, req, "allowed: "+strings.Join(g.Roots(), ", "), nil)
		}
	}
	var first error
	for _, c := range cands {
		d, err := g.resolveIn(c.rt, c.rel, req)
		if err == nil {
			return d, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

func (g *Guard) resolveIn(rt *root, rel, req string) (*Dir, error) {
	f, err := g.openBeneath(rt, rel)
	if err != nil {
		return nil, classify(rt, rel, req, err)
	}
	dev, ino, isDir, err := statDevIno(f)
	if err != nil || !isDir {
		f.Close()
		if err == nil {
			return nil, refuse(ReasonNotDirectory, req, "", syscall.ENOTDIR)
		}
		return nil, refuse(ReasonInvalid, req, "", err)
	}
	return &Dir{File: f, Path: displayPath(rt, rel, f), Root: rt.path, Dev: dev, Ino: ino}, nil
}

// underRoot reports whether the absolute path p lexically starts with the clean root path
// base and returns the rest. Only "" and "." components are dropped: ".." is kept and left to
// the kernel, because a ".." after a symlink does not mean what a lexical Clean would make it.
func underRoot(p, base string) (string, bool) {
	pc := components(p)
	bc := components(base)
	if len(pc) < len(bc) {
		return "", false
	}
	for i := range bc {
		if pc[i] != bc[i] {
			return "", false
		}
	}
	if len(pc) == len(bc) {
		return ".", true
	}
	return strings.Join(pc[len(bc):], "/"), true
}

func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// lexicallyEscapes reports whether rel's ".." components climb above its start at any
// point, the way RESOLVE_BENEATH judges them (re-entering later does not help).
func lexicallyEscapes(rel string) bool {
	depth := 0
	for _, c := range components(rel) {
		if c == ".." {
			depth--
			if depth < 0 {
				return true
			}
		} else {
			depth++
		}
	}
	return false
}

// classify turns a failed lookup into a reason. The lookup already refused the path; this
// only chooses the words, so racing with the filesystem here cannot let anything through.
func classify(rt *root, rel, req string, err error) *Error {
	if errors.Is(err, ErrBusy) || errors.Is(err, os.ErrClosed) {
		return refuse(ReasonInvalid, req, "", err)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT:
			return refuse(ReasonNotFound, req, "", err)
		case syscall.ENOTDIR:
			return refuse(ReasonNotDirectory, req, "", err)
		case syscall.ENAMETOOLONG:
			return refuse(ReasonTooLong, req, "a component or the resolved path is too long", err)
		case syscall.EXDEV:
			return escapeError(rt, rel, req, err)
		case syscall.ELOOP:
			r, detail := diagnose(rt, rel)
			switch r {
			case ReasonMagicLink, ReasonSymlinkEscape, ReasonDotDotEscape:
				return refuse(r, req, detail, err)
			}
			return refuse(ReasonInvalid, req, "symbolic link loop or too many symbolic links", err)
		}
		return refuse(ReasonInvalid, req, errno.Error(), err)
	}
	// os.Root reports an escape with an unexported non-errno error; anything else that is not
	// an errno is treated the same way, which can only make the words stricter.
	return escapeError(rt, rel, req, err)
}

func escapeError(rt *root, rel, req string, err error) *Error {
	if lexicallyEscapes(rel) {
		return refuse(ReasonDotDotEscape, req, "", err)
	}
	r, detail := diagnose(rt, rel)
	if r == ReasonMagicLink {
		return refuse(ReasonMagicLink, req, detail, err)
	}
	return refuse(ReasonSymlinkEscape, req, detail, err)
}

type step struct {
	name     string
	fromLink bool
}

// diagnose walks rel inside the root (through os.Root, so it cannot leave it either) to name
// the first thing wrong with it. It returns "" when it finds nothing (the tree changed).
func diagnose(rt *root, rel string) (Reason, string) {
	var pending []step
	for _, c := range components(rel) {
		pending = append(pending, step{name: c})
	}
	var stack []string
	links := 0
	for len(pending) > 0 {
		s := pending[0]
		pending = pending[1:]
		if s.name == ".." {
			if len(stack) == 0 {
				if s.fromLink {
					return ReasonSymlinkEscape, "a relative symbolic link climbs above the root"
				}
				return ReasonDotDotEscape, ""
			}
			stack = stack[:len(stack)-1]
			continue
		}
		dir := "."
		if len(stack) > 0 {
			dir = strings.Join(stack, "/")
		}
		name := filepath.Join(dir, s.name)
		fi, err := rt.r.Lstat(name)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return ReasonNotFound, ""
			}
			return "", ""
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			links++
			if links > maxSymlinks {
				return ReasonInvalid, "symbolic link loop"
			}
			target, err := rt.r.Readlink(name)
			if err != nil {
				return "", ""
			}
			detail := fmt.Sprintf("%q -> %q", name, target)
			if looksMagic(target) || (filepath.IsAbs(target) && onProcfs(rt, dir)) {
				return ReasonMagicLink, detail
			}
			if filepath.IsAbs(target) {
				return ReasonSymlinkEscape, detail + " (absolute links are not followed)"
			}
			var exp []step
			for _, c := range components(target) {
				exp = append(exp, step{name: c, fromLink: true})
			}
			pending = append(exp, pending...)
			if lexicallyEscapesSteps(stack, exp) {
				return ReasonSymlinkEscape, detail
			}
			continue
		}
		if !fi.IsDir() {
			return ReasonNotDirectory, ""
		}
		stack = append(stack, s.name)
	}
	return "", ""
}

// lexicallyEscapesSteps reports whether a link's expansion climbs above the root from stack.
func lexicallyEscapesSteps(stack []string, exp []step) bool {
	depth := len(stack)
	for _, s := range exp {
		if s.name == ".." {
			depth--
			if depth < 0 {
				return true
			}
		} else {
			depth++
		}
	}
	return false
}

// looksMagic reports whether a link target names /proc, where links are magic.
func looksMagic(target string) bool {
	return strings.HasPrefix(target, "/proc/") || target == "/proc" ||
		strings.Contains("/"+target+"/", "/proc/self/") || strings.Contains("/"+target+"/", "/proc/thread-self/")
}

// displayPath spells the opened directory under the configured root: the kernel's own name for
// the handle where the OS offers one, else the lexically cleaned request.
func displayPath(rt *root, rel string, f *os.File) string {
	if p, ok := handlePath(f); ok {
		if r, ok := underRoot(p, rt.real); ok && !lexicallyEscapes(r) {
			return filepath.Join(rt.path, r)
		}
	}
	return filepath.Join(rt.path, filepath.Clean(rel))
}

// Within reports whether path is root or below it, by name (both cleaned; no symlink is
// followed): for placing one path relative to another, not for opening anything.
func Within(path, root string) bool {
	path, root = filepath.Clean(path), filepath.Clean(root)
	if path == root {
		return true
	}
	if root == "/" {
		return strings.HasPrefix(path, "/")
	}
	return strings.HasPrefix(path, root+string(filepath.Separator))
}
