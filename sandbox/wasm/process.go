// SPDX-License-Identifier: MIT

package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/third_party/wazero"
	"github.com/fledgehq/fledge/third_party/wazero/api"
	"github.com/fledgehq/fledge/third_party/wazero/experimental"
	"github.com/fledgehq/fledge/third_party/wazero/experimental/sysfs"
	"github.com/fledgehq/fledge/third_party/wazero/sys"

	"github.com/fledgehq/fledge/sandbox"
)

// Why a module was stopped from outside.
const (
	stopNone int32 = iota
	stopTimeout
	stopCancelled
	stopTerm
	stopKill
	stopPipe // the session stopped reading the plugin's stdout
)

// process is one running module. It implements sandbox.Process.
type process struct {
	s       *Sandbox
	opts    Options
	timeout time.Duration

	ctx    context.Context // the module's run context; cancelled to close it
	cancel context.CancelFunc

	why      atomic.Int32
	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{}
	res      *sandbox.Result

	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	closers []io.Closer
	fss     []*rootFS
	mem     *memLimit
	code    *compiled // the compiled module this run holds (released by finish)
	mod     api.Module
	g       *guest
	onExit  []func()
	relOnce sync.Once
}

func newProcess(s *Sandbox, spec *sandbox.Spec) (*process, error) {
	p := &process{
		s: s, opts: s.opts, timeout: s.opts.Timeout,
		stopped: make(chan struct{}), done: make(chan struct{}),
		mem: &memLimit{limit: uint64(s.opts.MemoryBytes)},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	// The session closes its ends of the stdio pipes as soon as Start returns (a native
	// child holds its own copies). The module runs in this process, so it takes its own
	// duplicates, closed when it ends: that is the EOF the session waits for.
	var err error
	if p.stdin, err = p.own(spec.Stdin); err != nil {
		p.release()
		return nil, err
	}
	if p.stdout, err = p.own(spec.Stdout); err != nil {
		p.release()
		return nil, err
	}
	if p.stderr, err = p.own(spec.Stderr); err != nil {
		p.release()
		return nil, err
	}
	if p.stdin == nil {
		p.stdin = bytes.NewReader(nil)
	}
	if p.stdout == nil {
		p.stdout = io.Discard
	}
	if p.stderr == nil {
		p.stderr = io.Discard
	}
	for _, pre := range s.opts.Preopens() {
		fs, err := newRootFS(pre.Host, pre.ReadOnly)
		if err != nil {
			p.release()
			return nil, fmt.Errorf("preopen %s: %w", pre.Guest, err)
		}
		p.fss = append(p.fss, fs)
	}
	p.g = newGuest(p)
	return p, nil
}

// own returns a duplicate of f if it is an *os.File, else f itself.
func (p *process) own(v any) (rw interface {
	io.Reader
	io.Writer
}, err error) {
	switch f := v.(type) {
	case nil:
		return nil, nil
	case *os.File:
		d, err := dupFile(f)
		if err != nil {
			return nil, fmt.Errorf("duplicate stdio: %w", err)
		}
		p.closers = append(p.closers, d)
		return d, nil
	case io.ReadWriter:
		return f, nil
	case io.Reader:
		return readOnly{f}, nil
	case io.Writer:
		return writeOnly{f}, nil
	}
	return nil, fmt.Errorf("%w: unsupported stdio type %T", sandbox.ErrInvalidSpec, v)
}

type readOnly struct{ io.Reader }

func (readOnly) Write([]byte) (int, error) { return 0, errors.New("not writable") }

type writeOnly struct{ io.Writer }

func (writeOnly) Read([]byte) (int, error) { return 0, io.EOF }

// closeStdio closes the process's duplicates of the session's stdio. A pipe write or read
// blocked on one returns (Go's poller wakes it); the session sees EOF.
func (p *process) closeStdio() {
	for _, c := range p.closers {
		_ = c.Close()
	}
}

// release closes what the process owns; safe to call more than once.
func (p *process) release() {
	p.relOnce.Do(func() {
		for _, c := range p.closers {
			_ = c.Close()
		}
		for _, fs := range p.fss {
			fs.close()
		}
		p.cancel()
	})
}

// instantiate makes this run's instance of cm in the shared runtime rt (WASI and the fledge
// host module are already there). The instance is anonymous, so any number of runs of the
// same module coexist; everything that confines it is set here, per run.
func (p *process) instantiate(rt wazero.Runtime, cm wazero.CompiledModule, name string) error {
	ctx := p.ctx
	fsc := wazero.NewFSConfig()
	for i, pre := range p.opts.Preopens() {
		fsc = fsc.(sysfs.FSConfig).WithSysFSMount(p.fss[i], pre.Guest)
	}
	// No environment, no arguments beyond the program name, no stdin: everything the plugin
	// gets comes in init. Clocks and randomness are real (a plugin may time things).
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(name).
		WithStdin(bytes.NewReader(nil)).
		WithStdout(p.g.outputWriter()).
		WithStderr(p.stderr).
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader).
		WithNanosleep(p.nanosleep).
		WithFSConfig(fsc).
		WithStartFunctions() // _start runs in run(), after BeforeExec
	mod, err := rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, p.mem), cm, mc)
	if err != nil {
		return fmt.Errorf("%w: instantiate: %v", ErrModule, err)
	}
	p.mod = mod
	return nil
}

// nanosleep is WASI's sleep, cut short when the module is stopped (wazero's default sleeps
// through a close).
func (p *process) nanosleep(ns int64) {
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.stopped:
	}
}

// stopGrace is how long a stopped module's _start may take to return. Guest code ends at
// its next check of the closed context and fledge's own host functions wait on p.stopped, so
// it normally returns at once; only a host call blocked in the operating system (a write to
// a pipe nobody reads, a read on a hung filesystem) can outlast it, and the run does not
// wait for that.
const stopGrace = 500 * time.Millisecond

// errAbandoned is the result of a _start that did not return within stopGrace of its stop.
var errAbandoned = errors.New("a host call did not return after the module was stopped")

// closeModule closes this run's instance (its memory goes with it).
func (p *process) closeModule() {
	if p.mod != nil {
		_ = p.mod.Close(context.Background())
	}
}

// finish closes the instance and releases what the run holds: its stdio duplicates and
// preopens, the compiled module and the shared runtime.
func (p *process) finish() {
	p.closeModule()
	p.release()
	if p.code != nil {
		p.code.release()
		p.s.eng.release()
	}
}

func (p *process) run() {
	start := time.Now()
	defer close(p.done)
	go p.g.readLoop()
	timer := time.AfterFunc(p.timeout, func() { p.stop(stopTimeout) })
	// _start runs on a goroutine of its own: closing the module's context stops guest code,
	// but not a host call the guest is blocked in, and the deadline and signals must end
	// the run even then.
	ended := make(chan error, 1)
	// The host functions find this run through the call's context (compiled.go).
	callCtx := context.WithValue(p.ctx, guestKey{}, p.g)
	go func() {
		_, err := p.mod.ExportedFunction("_start").Call(callCtx)
		ended <- err
	}()
	err, returned := p.await(ended)
	timer.Stop()
	if returned {
		p.g.flushOutput()
	}
	res := p.result(err)
	res.Duration = time.Since(start)
	// The module is gone: release the line reader (it may wait to hand over a line nobody
	// will receive). Recorded as no stop reason, since the result is already made.
	p.stop(stopNone)
	if returned {
		p.finish()
	} else {
		// The blocked goroutine still uses the module and its guest state: the instance is
		// closed by it when (if ever) its call returns. The stdio duplicates are closed now:
		// that ends a write blocked on a full pipe, and gives the session its EOF.
		p.closeStdio()
		go func() {
			<-ended
			p.finish()
		}()
	}
	for _, f := range p.onExit {
		f()
	}
	p.res = res
}

// await waits for _start to return, or, once the module is stopped, at most stopGrace
// more. returned is false when it gave up (err is then errAbandoned).
func (p *process) await(ended <-chan error) (err error, returned bool) {
	select {
	case err := <-ended:
		return err, true
	case <-p.stopped:
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case err := <-ended:
		return err, true
	case <-t.C:
		return errAbandoned, false
	}
}

// result turns how _start ended into a sandbox.Result.
func (p *process) result(err error) *sandbox.Result {
	r := &sandbox.Result{
		Mode:       sandbox.Mode{Confinement: Confinement, Cgroup: "none", TreeKill: "module close"},
		PeakMemory: int64(p.mem.peak.Load()),
		OOMKilled:  p.mem.refused.Load(),
	}
	var ee *sys.ExitError
	exited := errors.As(err, &ee) && ee.ExitCode() != sys.ExitCodeContextCanceled && ee.ExitCode() != sys.ExitCodeDeadlineExceeded
	why := p.why.Load()
	if err != nil && !exited && why != stopNone {
		switch why {
		case stopTimeout:
			r.TimedOut = true
		case stopCancelled:
			r.Cancelled = true
		}
		r.Killed = 1
		switch why {
		case stopTerm:
			r.ExitCode, r.Signal = 128+int(syscall.SIGTERM), "SIGTERM"
		case stopPipe:
			r.ExitCode, r.Signal = 128+int(syscall.SIGPIPE), "SIGPIPE"
		default:
			r.ExitCode, r.Signal = 128+int(syscall.SIGKILL), "SIGKILL"
		}
		if r.TimedOut {
			fmt.Fprintf(p.stderr, "fledge: wasm plugin stopped: it ran longer than its %s limit\n", p.timeout)
		}
		if errors.Is(err, errAbandoned) {
			fmt.Fprintf(p.stderr, "fledge: wasm plugin: %v; the run ended without it\n", errAbandoned)
		}
		return r
	}
	switch {
	case err == nil:
	case exited:
		code := ee.ExitCode()
		if code > 255 {
			code = 255
		}
		r.ExitCode = int(code)
	default:
		// A trap: unreachable, out-of-bounds access, a host function refusing bad input.
		r.Trap = trapMessage(err)
		r.ExitCode = 128 + 6 // as an abort
		if r.OOMKilled {
			r.Trap = "out of memory: " + r.Trap
		}
		fmt.Fprintf(p.stderr, "fledge: wasm plugin trapped: %s\n", r.Trap)
	}
	if r.OOMKilled && r.Trap == "" {
		fmt.Fprintf(p.stderr, "fledge: wasm plugin hit its memory limit (%d bytes)\n", p.opts.MemoryBytes)
	}
	return r
}

// trapMessage is the first line of a wazero error (the stack trace follows), bounded.
func trapMessage(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func (p *process) stop(why int32) {
	p.stopOnce.Do(func() {
		p.why.Store(why)
		close(p.stopped)
		p.cancel()
	})
}

func (p *process) Pid() int { return 0 }

func (p *process) Wait() (*sandbox.Result, error) {
	<-p.done
	return p.res, nil
}

// Signal: a module cannot handle signals; SIGTERM and SIGINT close it (reported as
// SIGTERM), SIGKILL as Kill.
func (p *process) Signal(sig os.Signal) error {
	switch sig {
	case syscall.SIGTERM, os.Interrupt:
		p.stop(stopTerm)
	case syscall.SIGKILL:
		p.stop(stopKill)
	default:
		return fmt.Errorf("wasm plugin: signal %v is not supported", sig)
	}
	return nil
}

func (p *process) Kill() error {
	p.stop(stopKill)
	return nil
}

// memLimit bounds a module's linear memory. wazero only checks a module's own declared
// maximum; this allocator refuses to grow past the policy limit and remembers that it did,
// which is how a memory-bound stop is told from any other failure (OOMKilled).
type memLimit struct {
	limit   uint64
	refused atomic.Bool
	peak    atomic.Uint64
}

// Allocate returns the module's linear memory: mapped outside Go's heap where the platform
// allows it (mappedMemory), else a slice of Go's heap.
func (m *memLimit) Allocate(_, maxBytes uint64) experimental.LinearMemory {
	if mem := newMappedMemory(m, min(maxBytes, m.limit)); mem != nil {
		return mem
	}
	return &heapMemory{m: m}
}

// grant checks a size the module asks for against the limit, and records the peak.
func (m *memLimit) grant(size uint64) bool {
	if size > m.limit {
		m.refused.Store(true)
		return false
	}
	if size > m.peak.Load() {
		m.peak.Store(size)
	}
	return true
}

// heapMemory is a linear memory in Go's heap, copied to a larger slice when it grows.
type heapMemory struct {
	m   *memLimit
	buf []byte
}

func (l *heapMemory) Reallocate(size uint64) []byte {
	if !l.m.grant(size) {
		return nil
	}
	if size <= uint64(cap(l.buf)) {
		l.buf = l.buf[:size] // wasm memory never shrinks: the tail was never handed out
	} else {
		// Grow geometrically (bounded by the limit) so a guest growing page by page does
		// not copy its whole memory each time.
		c := max(size, min(2*uint64(cap(l.buf)), l.m.limit))
		nb := make([]byte, size, c)
		copy(nb, l.buf)
		l.buf = nb
	}
	return l.buf
}

func (l *heapMemory) Free() { l.buf = nil }
