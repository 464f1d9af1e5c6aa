// SPDX-License-Identifier: MIT

//go:build unix

package stub

import (
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// Stdio turns a Spec's readers/writers into the three files a child gets. *os.File values
// that are not terminals pass straight through; everything else (and every terminal, so a
// child never holds a tty fd it could TIOCSTI into) goes through a pipe copied by the host.
type Stdio struct {
	Files [3]*os.File // what the child gets as 0, 1, 2

	child   []*os.File // ends to close in the host once the child started
	readers []*os.File // host read ends of output pipes
	// copies are the output copies, started once both outputs exist; the last one to end
	// closes copied (Finish waits on it without a goroutine of its own).
	copies  []func()
	pending atomic.Int32
	copied  chan struct{}
}

// OpenStdio prepares stdio. nil stdin reads /dev/null; nil stdout/stderr discard.
func OpenStdio(stdin io.Reader, stdout, stderr io.Writer) (*Stdio, error) {
	s := &Stdio{}
	var err error
	if s.Files[0], err = s.input(stdin); err != nil {
		s.Abort()
		return nil, err
	}
	for i, w := range []io.Writer{stdout, stderr} {
		if s.Files[i+1], err = s.output(w); err != nil {
			s.Abort()
			return nil, err
		}
	}
	if len(s.copies) > 0 {
		s.copied = make(chan struct{})
		s.pending.Store(int32(len(s.copies)))
		for _, c := range s.copies {
			go func() {
				c()
				if s.pending.Add(-1) == 0 {
					close(s.copied)
				}
			}()
		}
	}
	return s, nil
}

func passable(f *os.File) bool { return f != nil && !term.IsTerminal(int(f.Fd())) }

func (s *Stdio) input(r io.Reader) (*os.File, error) {
	if r == nil {
		f, err := os.Open(os.DevNull)
		if err == nil {
			s.child = append(s.child, f)
		}
		return f, err
	}
	if f, ok := r.(*os.File); ok && passable(f) {
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.child = append(s.child, pr)
	// Not waited for: a reader that never returns must not hold up Wait. The copy ends
	// with EPIPE once the child side is closed.
	go func() {
		_, _ = io.Copy(pw, r)
		pw.Close()
	}()
	return pr, nil
}

func (s *Stdio) output(w io.Writer) (*os.File, error) {
	if w == nil {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err == nil {
			s.child = append(s.child, f)
		}
		return f, err
	}
	if f, ok := w.(*os.File); ok && passable(f) {
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.child = append(s.child, pw)
	s.readers = append(s.readers, pr)
	s.copies = append(s.copies, func() { _, _ = io.Copy(w, pr) })
	return pw, nil
}

// Started closes the host's copies of the child's ends, so EOF arrives when the last
// process holding them is gone.
func (s *Stdio) Started() {
	for _, f := range s.child {
		f.Close()
	}
	s.child = nil
}

// Finish waits up to grace for the output copies to drain (the tree is already dead, so
// they normally end at once), then closes the read ends so no goroutine blocks on a pipe
// someone outside the tree might hold. It reports whether the copies finished in time.
func (s *Stdio) Finish(grace time.Duration) bool {
	ok := true
	if s.copied != nil {
		t := time.NewTimer(grace)
		select {
		case <-s.copied:
		case <-t.C:
			ok = false
		}
		t.Stop()
	}
	for _, r := range s.readers {
		r.Close()
	}
	return ok
}

// Abort releases everything after a failed start.
func (s *Stdio) Abort() {
	s.Started()
	for _, r := range s.readers {
		r.Close()
	}
}
