// SPDX-License-Identifier: MIT

//go:build unix

package fallback

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// Runner starts a spec through the stub and manages it as one process group.
type Runner struct {
	StubPath string
	// Wrapper, when set, returns programs to run before the stub (e.g. sandbox-exec -p
	// PROFILE); tmp is the private temp dir ("" without PrivateTmp).
	Wrapper func(spec *sandbox.Spec, tmp string) ([]string, error)
	// Policy, when set, may adjust the stub policy (add rlimits, ...).
	Policy func(p *stub.Policy)
	Mode   sandbox.Mode
}

// Start runs spec.
func (r *Runner) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Path == "" || len(spec.Args) == 0 {
		return nil, fmt.Errorf("%w: empty program", sandbox.ErrInvalidSpec)
	}
	p := &process{spec: spec, mode: r.Mode, start: time.Now()}
	p.mode.Degraded = append([]string{}, r.Mode.Degraded...)
	ok := false
	defer func() {
		if !ok && p.tmp != "" {
			os.RemoveAll(p.tmp)
		}
	}()
	env := append([]string{}, spec.Env...)
	if spec.PrivateTmp {
		parent, err := safefs.TempParent(spec.Access.ReadWrite) // never beneath a directory the run can replace
		if err != nil {
			return nil, fmt.Errorf("%w: private tmp: %w", sandbox.ErrLaunch, err)
		}
		if p.tmp, err = os.MkdirTemp(parent, "fledge-tmp-"); err != nil {
			return nil, fmt.Errorf("%w: private tmp: %w", sandbox.ErrLaunch, err)
		}
		env = setEnv(env, "TMPDIR", p.tmp)
	}
	pol := &stub.Policy{Path: spec.Path, Args: spec.Args, Env: env, NoFile: spec.Limits.NoFile}
	if r.Policy != nil {
		r.Policy(pol)
	}
	var wrapper []string
	if r.Wrapper != nil {
		var err error
		if wrapper, err = r.Wrapper(spec, p.tmp); err != nil {
			return nil, err
		}
	}
	stdio, err := stub.OpenStdio(spec.Stdin, spec.Stdout, spec.Stderr)
	if err != nil {
		return nil, fmt.Errorf("%w: stdio: %w", sandbox.ErrLaunch, err)
	}
	p.stdio = stdio
	if err := sandbox.RunBeforeExec(spec); err != nil {
		stdio.Started()
		stdio.Abort()
		return nil, err
	}
	l := &stub.Launch{
		StubPath: r.StubPath, Wrapper: wrapper, Policy: pol, Dir: spec.Dir,
		Stdin: stdio.Files[0], Stdout: stdio.Files[1], Stderr: stdio.Files[2],
		Sys: &syscall.SysProcAttr{Setsid: true}, // pgid = pid from the first instruction
	}
	p.proc, err = l.Start()
	if err == nil {
		p.ProcessBase = sandbox.NewProcessBase(p.proc)
	}
	stdio.Started()
	if err != nil {
		stdio.Abort()
		return nil, err
	}
	ok = true
	go p.wait()
	go p.watch(ctx)
	return p, nil
}

func setEnv(env []string, key, val string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+val)
}

type process struct {
	sandbox.ProcessBase
	spec  *sandbox.Spec
	mode  sandbox.Mode
	start time.Time
	proc  *os.Process
	stdio *stub.Stdio
	tmp   string

	mu                  sync.Mutex
	signalled           bool
	timedOut, cancelled bool
}

func (p *process) Kill() error { p.group(syscall.SIGKILL); return nil }

// Interrupt sends SIGINT to the process group, as the terminal's Ctrl+C would.
func (p *process) Interrupt() error { return syscall.Kill(-p.proc.Pid, syscall.SIGINT) }

// group signals the process group; it reports whether anything was still in it.
func (p *process) group(sig syscall.Signal) bool {
	if syscall.Kill(-p.proc.Pid, sig) != nil {
		return false
	}
	p.mu.Lock()
	p.signalled = true
	p.mu.Unlock()
	return true
}

func (p *process) watch(ctx context.Context) {
	sandbox.Watchdog(ctx, p.spec.Limits, p.Exited(), func(r sandbox.StopReason) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.timedOut = r == sandbox.StopTimeout
		p.cancelled = r == sandbox.StopCancel
	}, func() { p.group(syscall.SIGTERM) }, func() { p.group(syscall.SIGKILL) })
}

func (p *process) wait() {
	st, werr := p.proc.Wait()
	p.MarkExited()
	res := &sandbox.Result{Mode: p.mode}
	if werr == nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				res.ExitCode = 128 + int(ws.Signal())
				res.Signal = signalName(ws.Signal())
			} else {
				res.ExitCode = ws.ExitStatus()
			}
		}
	}
	// Survivors in the group die with the main process.
	if p.group(syscall.SIGKILL) {
		res.Killed = 1 // at least one; without /proc a portable count is not available
	}
	if !p.stdio.Finish(2 * time.Second) {
		res.Mode.Degraded = append(res.Mode.Degraded, "output copy did not finish (a process outside the group holds the pipes)")
	}
	res.Duration = time.Since(p.start)
	p.mu.Lock()
	res.TimedOut, res.Cancelled = p.timedOut, p.cancelled
	p.mu.Unlock()
	var errs []error
	if werr != nil {
		errs = append(errs, werr)
	}
	if p.tmp != "" {
		if err := os.RemoveAll(p.tmp); err != nil {
			errs = append(errs, err)
		}
	}
	p.Finish(res, errors.Join(errs...))
}
