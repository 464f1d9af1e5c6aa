// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// How a run of fledge is ended from outside, and what each does to the plugin session in
// progress. Every one ends it as Ctrl+C does (the protocol's cancel, SIGINT to the plugin's
// process group, then the ladder; SIGTERM: the cancel, then the ladder), so the plugin's
// tree is gone, its plugin_exit is on record and the run's temp dirs are removed before
// fledge exits:
//
//   - SIGINT (Ctrl+C), SIGTERM;
//   - SIGHUP: the terminal went away (its window closed, the ssh connection dropped);
//   - the reader of fledge's stdout or stderr went away (`fledge x | head -1`, an MCP
//     client that exited): a write to either failed with EPIPE.
//
// A Go program dies of SIGPIPE on such a write to fd 1 or 2 unless it asks for SIGPIPE
// (os/signal, "SIGPIPE"); WatchOutput asks, so the write fails with EPIPE instead and the
// session is ended here. fledge then exits 141 (ExitBrokenPipe), as a shell's program killed
// by SIGPIPE does. A command that holds no host (no plugin run, nothing to clean up, such as
// `fledge audit show`) exits 141 at once, as it would have died before.

// endSignals are the signals that end a run (SIGPIPE comes through WatchOutput).
var endSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// ends is the process's one watch of its stdout and stderr.
var ends struct {
	once   sync.Once
	closed atomic.Bool  // a write to fd 1 or 2 failed: the reader is gone
	hosts  atomic.Int64 // open Hosts: what a closed output must not skip cleaning up
	mu     sync.Mutex
	subs   map[chan<- os.Signal]struct{}
}

// WatchOutput makes a closed stdout or stderr end the run as the signals do (see above).
// fledge's main calls it before anything is written.
func WatchOutput() {
	ends.once.Do(func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGPIPE)
		go func() {
			for range c {
				// SIGPIPE also comes from writes to a plugin's pipes (a plugin that closed
				// its stdin): only fd 1 or 2 broken ends the run.
				if ends.closed.Load() || !outputBroken() {
					continue
				}
				ends.closed.Store(true)
				if ends.hosts.Load() == 0 {
					os.Exit(ExitBrokenPipe)
				}
				ends.mu.Lock()
				for s := range ends.subs {
					sendEnd(s)
				}
				ends.mu.Unlock()
			}
		}()
	})
}

// OutputClosed reports whether a write to fledge's stdout or stderr failed because its reader
// went away; fledge's exit status is then ExitBrokenPipe. Called as fledge exits.
func OutputClosed() bool {
	if ends.closed.Load() {
		return true
	}
	if !outputBroken() {
		return false
	}
	// The reader is gone: a write that failed a moment ago has its SIGPIPE on the way to the
	// watch. Let it land (bounded); none comes when fledge wrote nothing after the reader left.
	deadline := time.Now().Add(settleOutput)
	for time.Now().Before(deadline) {
		if ends.closed.Load() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// settleOutput bounds how long OutputClosed waits for a failed write's SIGPIPE.
const settleOutput = 50 * time.Millisecond

func sendEnd(c chan<- os.Signal) {
	select {
	case c <- syscall.SIGPIPE:
	default: // an ending is already waiting there
	}
}

// notifyEnd relays every ending of the run to c: the signals as themselves, a closed output
// as SIGPIPE. stopEnd undoes it.
func notifyEnd(c chan<- os.Signal) {
	signal.Notify(c, endSignals...)
	ends.mu.Lock()
	if ends.subs == nil {
		ends.subs = map[chan<- os.Signal]struct{}{}
	}
	ends.subs[c] = struct{}{}
	ends.mu.Unlock()
	if ends.closed.Load() {
		sendEnd(c)
	}
}

func stopEnd(c chan<- os.Signal) {
	signal.Stop(c)
	ends.mu.Lock()
	delete(ends.subs, c)
	ends.mu.Unlock()
}

// NotifyContext is ctx, cancelled when the run is ended from outside (any of the endings
// above); stop releases it. The one rule for every command whose plugins end with its
// context (tools call, hooks run, invoke, serve) and for audit follow.
func NotifyContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	c := make(chan os.Signal, 1)
	notifyEnd(c)
	go func() {
		select {
		case <-c:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		stopEnd(c)
		cancel()
	}
}
