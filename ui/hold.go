// SPDX-License-Identifier: MIT

package ui

import (
	"io"
	"os"
)

// Holder is a UI that can hold piped plugin output while the host still has more of the
// plugin's messages in hand, and write it with one system call instead of one per
// message: a plugin printing many short lines was bound by fledge's writes. Output to a
// terminal is never held (it is shown as it comes), and nothing is held across a read of
// the plugin's pipe: the reader releases before it waits for more.
type Holder interface {
	// Hold makes piped Output wait in a bounded buffer (maxHeldPiped) until Release.
	Hold()
	// Release writes what was held and stops holding.
	Release()
}

// maxHeldPiped bounds the piped output Hold keeps; past it the buffer is written at once.
const maxHeldPiped = 64 << 10

// HoldingReader wraps the reader of a plugin's messages for u: what u shows is held while
// the messages of one read are handled, and released before the next read (which may
// wait). u that is no Holder: r as it is. Call the returned release when reading ends.
func HoldingReader(r io.Reader, u UI) (io.Reader, func()) {
	h, ok := u.(Holder)
	if !ok {
		return r, func() {}
	}
	return &holdingReader{r: r, h: h}, h.Release
}

type holdingReader struct {
	r io.Reader
	h Holder
}

func (hr *holdingReader) Read(p []byte) (int, error) {
	hr.h.Release()
	n, err := hr.r.Read(p)
	if n > 0 {
		hr.h.Hold()
	}
	return n, err
}

func (c *console) Hold() {
	c.outMu.Lock()
	c.holding = !c.ttyOut || c.errApart
	c.outMu.Unlock()
}

// holdErr keeps a stderr line while holding (reports false when it must be written now).
// Only when stderr is apart from stdout: there is no order between two files to keep.
func (c *console) holdErr(s []byte) bool {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if !c.holding || len(s) >= maxHeldPiped {
		return false
	}
	if len(c.pipedErr)+len(s) > maxHeldPiped {
		_, _ = c.err.Write(c.pipedErr)
		c.pipedErr = c.pipedErr[:0]
	}
	c.pipedErr = append(c.pipedErr, s...)
	return true
}

// apart reports whether stderr's lines need no order with stdout's: they are different
// files, or stderr is the null device. Anything it cannot tell (not files) is not apart.
func apart(out, err io.Writer) bool {
	of, ok1 := out.(*os.File)
	ef, ok2 := err.(*os.File)
	if !ok1 || !ok2 {
		return false
	}
	ei, e1 := ef.Stat()
	oi, e2 := of.Stat()
	if e1 != nil || e2 != nil {
		return false
	}
	if ni, err := os.Stat(os.DevNull); err == nil && os.SameFile(ei, ni) {
		return true
	}
	return !os.SameFile(ei, oi)
}

func (c *console) Release() {
	c.outMu.Lock()
	c.flushPipedLocked()
	c.holding = false
	c.outMu.Unlock()
}

// releaseHeld writes held output before something goes to stderr, so the two keep their
// order where they are one file (2>&1).
func (c *console) releaseHeld() {
	c.outMu.Lock()
	c.flushPipedLocked()
	c.outMu.Unlock()
}

func (c *console) flushPipedLocked() {
	if len(c.piped) > 0 {
		_, _ = c.out.Write(c.piped)
		c.piped = c.piped[:0]
	}
	if len(c.pipedErr) > 0 {
		_, _ = c.err.Write(c.pipedErr)
		c.pipedErr = c.pipedErr[:0]
	}
}
