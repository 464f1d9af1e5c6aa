// SPDX-License-Identifier: MIT

//go:build darwin

package darwin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// SandboxExec is where macOS ships the Seatbelt launcher.
const SandboxExec = "/usr/bin/sandbox-exec"

const (
	defaultKillGrace = 2 * time.Second
	stdioGrace       = 2 * time.Second // output copies after the tree is dead
	maxSweepRounds   = 64              // freeze rounds before the final SIGKILL
)

// Options configure the macOS sandbox. Zero values pick the defaults.
type Options struct {
	// StubPath is the executable holding stub.MaybeRun (default: this executable).
	StubPath string
	// SandboxExec overrides the sandbox-exec path (default SandboxExec).
	SandboxExec string
}

// Sandbox runs each Spec under a generated Seatbelt profile.
type Sandbox struct {
	stubPath    string
	sandboxExec string // "" when missing: no confinement available
	probeErr    error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// New probes for sandbox-exec and the stub. A missing sandbox-exec is not an error here:
// Report says so, non-strict specs run unconfined, strict ones are refused.
func New(opts Options) (*Sandbox, error) {
	s := &Sandbox{}
	sp := opts.StubPath
	if sp == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: locate stub: %w", sandbox.ErrLaunch, err)
		}
		sp = exe
	}
	// The profile allows exec of the stub by its resolved path, which is what Seatbelt sees.
	real, err := filepath.EvalSymlinks(sp)
	if err != nil {
		return nil, fmt.Errorf("%w: stub %s: %w", sandbox.ErrLaunch, sp, err)
	}
	s.stubPath = real
	se := opts.SandboxExec
	if se == "" {
		se = SandboxExec
	}
	if st, err := os.Stat(se); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		s.sandboxExec = se
	} else {
		s.probeErr = fmt.Errorf("%s not usable: %v", se, err)
	}
	return s, nil
}

// Report says what this Mac enforces.
func (s *Sandbox) Report() sandbox.Report {
	r := sandbox.Report{
		OS:          "darwin",
		Confinement: "seatbelt",
		CgroupMode:  "none",
		NetworkDeny: "seatbelt", UnixSocketDeny: "seatbelt",
		NetworkEgress: "seatbelt: a grant's loopback ports only (Seatbelt names no other host); other destinations get nothing",
		TreeKill:      "pgroup",
		Warnings: []string{
			"no memory, pids or cpu limits on macOS (rlimits only)",
			"tree kill is by process group plus a descendant sweep: an orphaned setsid child can survive",
		},
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if s.sandboxExec == "" {
		r.Confinement, r.NetworkDeny = "none", "none"
		r.Warnings = append(r.Warnings, "sandbox-exec unavailable: no filesystem or network confinement ("+s.probeErr.Error()+")")
	}
	return r
}

// Start runs spec through sandbox-exec and the stub.
func (s *Sandbox) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec == nil || spec.Path == "" || len(spec.Args) == 0 {
		return nil, fmt.Errorf("%w: no program", sandbox.ErrInvalidSpec)
	}
	if spec.Root != "" {
		return nil, sandbox.ErrNoImageRoot
	}
	mode := sandbox.Mode{Confinement: "seatbelt", Cgroup: "none", TreeKill: "pgroup"}
	mode.Degraded = append(mode.Degraded, "no_new_privs")
	if spec.Limits.MemoryBytes > 0 {
		mode.Degraded = append(mode.Degraded, "memory_limit")
	}
	if spec.Limits.Pids > 0 {
		mode.Degraded = append(mode.Degraded, "pids_limit")
	}
	if spec.Limits.CPU > 0 {
		mode.Degraded = append(mode.Degraded, "cpu_limit")
	}
	if s.sandboxExec == "" {
		if spec.Strict {
			return nil, fmt.Errorf("%w: seatbelt: %v", sandbox.ErrUnavailable, s.probeErr)
		}
		mode.Confinement = "none"
		mode.Degraded = append(mode.Degraded, "filesystem", "network")
	}

	var tmp string
	env := spec.Env
	if spec.PrivateTmp {
		parent, err := safefs.TempParent(spec.Access.ReadWrite) // never beneath a directory the run can replace
		if err != nil {
			return nil, fmt.Errorf("%w: private temp: %w", sandbox.ErrLaunch, err)
		}
		d, err := os.MkdirTemp(parent, "fledge-"+sandbox.SafeName(spec.Name)+"-")
		if err != nil {
			return nil, fmt.Errorf("%w: private temp: %w", sandbox.ErrLaunch, err)
		}
		tmp = d
		env = sandbox.WithEnv(env, "TMPDIR", tmp)
	}
	fail := func(err error) (sandbox.Process, error) {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
		return nil, err
	}

	var wrapper []string
	if s.sandboxExec != "" {
		profile, err := Profile(spec, ProfileOptions{Stub: s.stubPath, TempDir: tmp, Resolve: ResolveExisting})
		if err != nil {
			return fail(err)
		}
		wrapper = []string{s.sandboxExec, "-p", profile}
	}

	stdio, err := stub.OpenStdio(spec.Stdin, spec.Stdout, spec.Stderr)
	if err != nil {
		return fail(fmt.Errorf("%w: stdio: %w", sandbox.ErrLaunch, err))
	}
	l := &stub.Launch{
		StubPath: s.stubPath,
		Wrapper:  wrapper,
		Policy:   &stub.Policy{Path: spec.Path, Args: spec.Args, Env: env, NoFile: spec.Limits.NoFile},
		Dir:      spec.Dir,
		Stdin:    stdio.Files[0], Stdout: stdio.Files[1], Stderr: stdio.Files[2],
		// No Setpgid: the stub calls setsid, which a group leader may not do. After it the
		// main pid leads its own session and process group.
		Sys: &syscall.SysProcAttr{},
	}
	if err := sandbox.RunBeforeExec(spec); err != nil {
		stdio.Started()
		stdio.Abort()
		return fail(err)
	}
	start := time.Now()
	proc, err := l.Start()
	if err != nil {
		stdio.Abort()
		return fail(err)
	}
	stdio.Started()

	p := &process{
		ProcessBase: sandbox.NewProcessBase(proc),
		proc:        proc, pid: proc.Pid, stdio: stdio, tmp: tmp, mode: mode, start: start,
		grace: spec.Limits.KillGrace, killed: map[int]bool{}, killNow: make(chan struct{}),
	}
	if p.grace <= 0 {
		p.grace = defaultKillGrace
	}
	go p.supervise(ctx, spec.Limits.Timeout)
	return p, nil
}

type process struct {
	sandbox.ProcessBase
	proc  *os.Process
	pid   int
	stdio *stub.Stdio
	tmp   string
	mode  sandbox.Mode
	start time.Time
	grace time.Duration

	mu       sync.Mutex
	killed   map[int]bool // pids the sandbox signalled with SIGKILL
	state    *os.ProcessState
	waitErr  error
	timedOut bool
	cancel   bool

	killNow  chan struct{} // Kill was called
	killOnce sync.Once
	err      error // a failed wait, for Finish
}

// Kill returns once the main process is dead; the rest of the tree is swept with it, and
// Wait reports when everything (output copies included) is finished.
func (p *process) Kill() error {
	p.killOnce.Do(func() { close(p.killNow) })
	<-p.Exited()
	return nil
}

// supervise reaps the main process, enforces timeout and cancel (SIGTERM to the tree, grace,
// SIGKILL), and after the main process is gone kills whatever of the tree is left.
func (p *process) supervise(ctx context.Context, timeout time.Duration) {
	go func() {
		st, err := p.proc.Wait()
		p.mu.Lock()
		p.state, p.waitErr = st, err
		p.mu.Unlock()
		p.MarkExited()
	}()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-p.Exited():
	case <-timer:
		p.mu.Lock()
		p.timedOut = true
		p.mu.Unlock()
		p.terminate()
	case <-ctx.Done():
		p.mu.Lock()
		p.cancel = true
		p.mu.Unlock()
		p.terminate()
	case <-p.killNow:
		p.sweep()
	}
	<-p.Exited()
	// The main process is gone: nothing it started may outlive it.
	p.sweep()
	drained := p.stdio.Finish(stdioGrace)
	if p.tmp != "" {
		_ = os.RemoveAll(p.tmp)
	}
	r := p.finish(drained) // sets p.err on a failed wait
	p.Finish(r, p.err)
}

// terminate asks the tree to stop, then kills it after the grace period.
func (p *process) terminate() {
	p.signalTree(unix.SIGTERM)
	t := time.NewTimer(p.grace)
	defer t.Stop()
	select {
	case <-p.Exited():
	case <-t.C:
	case <-p.killNow:
	}
	p.sweep()
}

// Interrupt sends SIGINT to the process group, as the terminal's Ctrl+C would.
func (p *process) Interrupt() error { return unix.Kill(-p.pid, unix.SIGINT) }

// signalTree sends sig to the process group and every current member of the tree.
func (p *process) signalTree(sig unix.Signal) {
	_ = unix.Kill(-p.pid, sig)
	for _, pid := range p.members() {
		_ = unix.Kill(pid, sig)
	}
}

// sweep freezes every member of the tree (SIGSTOP, so nothing forks while we look) until a
// snapshot shows no new one, then SIGKILLs all of them and the process group.
func (p *process) sweep() {
	stopped := map[int]bool{}
	for round := 0; round < maxSweepRounds; round++ {
		fresh := 0
		for _, pid := range p.members() {
			if !stopped[pid] {
				stopped[pid] = true
				fresh++
				_ = unix.Kill(pid, unix.SIGSTOP)
			}
		}
		if fresh == 0 {
			break
		}
	}
	_ = unix.Kill(-p.pid, unix.SIGKILL)
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid := range stopped {
		if unix.Kill(pid, unix.SIGKILL) == nil {
			p.killed[pid] = true
		}
	}
}

// members snapshots the process table and selects this run's tree. Once the main process
// is reaped its pid may be reused by a stranger, so from then on only the process group
// (kept alive by its members) selects.
func (p *process) members() []int {
	kps, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil // the process-group kill still runs
	}
	snap := make([]Proc, 0, len(kps))
	for i := range kps {
		snap = append(snap, Proc{
			Pid:  int(kps[i].Proc.P_pid),
			Ppid: int(kps[i].Eproc.Ppid),
			Pgid: int(kps[i].Eproc.Pgid),
		})
	}
	root := p.pid
	select {
	case <-p.Exited():
		root = 0
	default:
	}
	return TreeMembers(snap, root, p.pid, os.Getpid(), os.Getppid())
}

func (p *process) finish(drained bool) *sandbox.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &sandbox.Result{
		TimedOut:  p.timedOut,
		Cancelled: p.cancel,
		Duration:  time.Since(p.start),
		Mode:      p.mode,
	}
	// The main process counts as killed only if the sandbox ended it.
	main := p.killed[p.pid]
	r.Killed = len(p.killed)
	if main && p.state != nil && !signalled(p.state) {
		r.Killed-- // it exited on its own between the snapshot and the signal
	}
	if !drained {
		r.Mode.Degraded = append(append([]string{}, r.Mode.Degraded...), "output_drain")
	}
	if p.state == nil {
		p.err = fmt.Errorf("%w: wait: %v", sandbox.ErrLaunch, p.waitErr)
	} else {
		r.ExitCode = p.state.ExitCode()
		if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.ExitCode = 128 + int(ws.Signal())
			r.Signal = unix.SignalName(ws.Signal())
		}
	}
	return r
}

func signalled(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}
