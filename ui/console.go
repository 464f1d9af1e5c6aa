// SPDX-License-Identifier: MIT

package ui

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"

	"github.com/fledgehq/fledge/ui/clip"
)

// Bounds on what a plugin can make fledge show.
const (
	MaxLineBytes   = 4 << 10 // one shown line of a message, log, option or prompt
	MaxShownLines  = 200     // lines of one log or prompt message
	MaxOptions     = 1000    // options of a select / multi_select
	MaxPluginName  = 64      // bytes of the plugin name in a prefix
	maxAnswerBytes = 4 << 10 // characters a prompt answer may hold

	// While a question is on screen, log lines and TTY output wait so they do not tear the
	// form; these bound what waits. Past maxHeldLogs, log lines are dropped and counted;
	// past maxHeldOutput, Output blocks until the question ends (output is data, never
	// dropped).
	maxHeldLogs   = 256
	maxHeldOutput = 256 << 10
)

// Options configures New.
type Options struct {
	In             *os.File  // stdin; questions are interactive only when it is a terminal
	Out, Err       io.Writer // stdout (plugin output) and stderr (everything else); nil = os.Stdout/os.Stderr
	NonInteractive bool      // --ni / FLEDGE_NON_INTERACTIVE=1
	// Color forces colour on or off; nil means auto: on when Err is a terminal, NO_COLOR is
	// unset and TERM is not "dumb".
	Color *bool
	// TTYOut says Out is a terminal (plugin output gets sanitised). Auto-detected when Out
	// is an *os.File.
	TTYOut bool
	// TTYErr says Err is a terminal (progress bar instead of plain lines). Auto-detected
	// when Err is an *os.File.
	TTYErr bool
	// Accessible selects huh's accessible (line-based, screen-reader friendly) prompts.
	// Also on when ACCESSIBLE is set in the environment or TERM=dumb.
	Accessible bool
}

// console implements UI for both modes; interactive only changes how questions are asked.
type console struct {
	in          *os.File
	out, err    io.Writer
	errFile     *os.File // Err as a file, for the form renderer and terminal size
	interactive bool
	accessible  bool
	color       bool
	ttyOut      bool
	ttyErr      bool

	qmu sync.Mutex // one question on screen at a time

	outMu sync.Mutex // orders writes to stdout
	// holding: piped output waits in piped (hold.go); both under outMu.
	holding bool
	piped   []byte
	// errApart: stderr is not a terminal and not the file stdout is (or it is the null
	// device), so its lines may be held apart from stdout's, in pipedErr (hold.go).
	errApart bool
	pipedErr []byte

	// mu guards the terminal: every write to err (and to out when it is a terminal, since
	// both usually share one screen) and the state below. Progress never waits for it.
	mu         sync.Mutex
	cond       *sync.Cond // Output waiting for a question to end
	asking     bool
	heldLogs   []string
	heldOut    []string
	heldOutLen int
	dropped    int
	midLine    bool // last TTY output did not end a line: a progress redraw would erase it
	closed     bool

	prog progress

	// logMu guards the log line buffer and the last plugin tag (Log).
	logMu     sync.Mutex
	logLine   []byte
	tagPlugin string
	tag       string
}

// New returns the UI for opts: interactive when !NonInteractive and In is a terminal,
// otherwise the non-interactive rules apply to every question.
func New(opts Options) UI {
	c := &console{in: opts.In, out: opts.Out, err: opts.Err}
	if c.out == nil {
		c.out = os.Stdout
	}
	if c.err == nil {
		c.err = os.Stderr
	}
	c.ttyOut = opts.TTYOut || isTerminal(c.out)
	c.ttyErr = opts.TTYErr || isTerminal(c.err)
	if f, ok := c.err.(*os.File); ok {
		c.errFile = f
	}
	c.interactive = !opts.NonInteractive && c.in != nil && term.IsTerminal(int(c.in.Fd()))
	c.accessible = opts.Accessible || os.Getenv("ACCESSIBLE") != "" || os.Getenv("TERM") == "dumb"
	if opts.Color != nil {
		c.color = *opts.Color
	} else {
		_, noColor := os.LookupEnv("NO_COLOR")
		c.color = c.ttyErr && !noColor && os.Getenv("TERM") != "dumb"
	}
	c.errApart = !c.ttyErr && apart(c.out, c.err)
	c.cond = sync.NewCond(&c.mu)
	c.prog.init(c)
	return c
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (c *console) Interactive() bool { return c.interactive }

// level colours (SGR parameters) and the canonical level names.
var levels = map[string]string{"debug": "2", "info": "36", "warn": "33", "error": "31"}

func normLevel(level string) string {
	l := strings.ToLower(strings.TrimSpace(level))
	if l == "warning" {
		l = "warn"
	}
	if _, ok := levels[l]; !ok {
		return "info" // unknown levels are shown, as info, rather than lost
	}
	return l
}

// pluginTag is the "[name]" prefix: plain, one line, bounded, so a plugin cannot pose as
// something else through its name.
func pluginTag(plugin string) string {
	name := clip.Mark(oneLine(plainText(plugin)), MaxPluginName, "…")
	if name == "" {
		name = "plugin"
	}
	return "[" + name + "]"
}

// appendPrefixed appends text with the prefix (tag, and " level:" when level is not
// empty) on every line. Every line gets it so a multi-line message cannot forge a line that
// looks like fledge's own (e.g. "fledge: warning: ...").
func (c *console) appendPrefixed(b []byte, tag, level, sgr, text string) []byte {
	text = clipLines(Sanitize(strings.TrimSuffix(text, "\n")), MaxLineBytes, MaxShownLines)
	for {
		ln, rest, more := strings.Cut(text, "\n")
		if c.color {
			b = append(b, "\x1b["...)
			b = append(b, sgr...)
			b = append(b, 'm')
			b = appendPrefix(b, tag, level)
			b = append(b, "\x1b[0m"...)
			if sgr == levels["debug"] {
				b = append(b, "\x1b[2m"...)
			}
		} else {
			b = appendPrefix(b, tag, level)
		}
		if ln != "" {
			b = append(b, ' ')
		}
		if c.color || !c.ttyErr || !strings.ContainsRune(ln, esc) {
			b = append(b, ln...)
		} else {
			// colour is off on a terminal: the plugin's colours go too
			b = append(b, plainText(ln)...)
		}
		if c.color && (strings.ContainsRune(ln, esc) || sgr == levels["debug"]) {
			b = append(b, "\x1b[0m"...) // a plugin colour must not leak into the next line
		}
		b = append(b, '\n')
		if !more {
			return b
		}
		text = rest
	}
}

func appendPrefix(b []byte, tag, level string) []byte {
	b = append(b, tag...)
	if level != "" {
		b = append(b, ' ')
		b = append(b, level...)
		b = append(b, ':')
	}
	return b
}

// maxKeptLogLine bounds the log line buffer kept between Log calls: a long message's
// buffer is dropped after it (a log message is shown cut to MaxShownLines lines of
// MaxLineBytes, so one can take up to 800 KiB).
const maxKeptLogLine = 16 << 10

// Log builds the line in a buffer it keeps, and keeps no string it is given (see
// TextCopier): a chatty plugin's log lines leave no garbage.
func (c *console) Log(plugin, level, message string) {
	l := normLevel(level)
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if c.tag == "" || plugin != c.tagPlugin {
		c.tagPlugin, c.tag = strings.Clone(plugin), pluginTag(plugin)
	}
	b := c.appendPrefixed(c.logLine[:0], c.tag, l, levels[l], message)
	if !c.color && !c.ttyErr && !isPlain(b) {
		// not a terminal: no escape sequence at all in the log (defence in depth)
		b = append(b[:0], plainText(string(b))...)
	}
	c.writeErr(b, true)
	if cap(b) > maxKeptLogLine {
		b = nil
	}
	c.logLine = b
}

func (c *console) Warn(message string) {
	line := c.appendPrefixed(nil, "fledge: warning:", "", levels["warn"], message)
	if !c.color && !c.ttyErr && !isPlain(line) {
		line = []byte(plainText(string(line)))
	}
	c.writeErr(line, false)
}

// CopiesText: Output and Log copy what they keep (TextCopier).
func (c *console) CopiesText() {}

// writeErr writes a whole line block to stderr, around the progress display. Plugin log
// lines wait (bounded) while a question is on screen; host warnings too, since they would
// tear the form just the same, but they are never dropped. s is the caller's to reuse once
// writeErr returns: what is held is copied.
func (c *console) writeErr(s []byte, droppable bool) {
	if c.errApart && c.holdErr(s) {
		return
	}
	c.releaseHeld()
	c.lock()
	defer c.unlock()
	if c.asking {
		if droppable && len(c.heldLogs) >= maxHeldLogs {
			c.dropped++
			return
		}
		c.heldLogs = append(c.heldLogs, string(s))
		return
	}
	c.prog.hide()
	if c.midLine && c.ttyOut && c.ttyErr {
		// both on one screen: the log line starts on its own line, not after half an output line
		_, _ = io.WriteString(c.err, "\n")
		c.midLine = false
	}
	_, _ = c.err.Write(s)
	c.prog.show()
}

func (c *console) Output(text string) {
	if text == "" {
		return
	}
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if !c.ttyOut {
		// piped: the plugin's data, byte for byte
		if !c.holding || len(text) >= maxHeldPiped {
			c.flushPipedLocked()
			_, _ = io.WriteString(c.out, text)
			return
		}
		if len(c.piped)+len(text) > maxHeldPiped {
			c.flushPipedLocked()
		}
		c.piped = append(c.piped, text...)
		return
	}
	text = Sanitize(text)
	c.lock()
	defer c.unlock()
	for c.asking && c.heldOutLen+len(text) > maxHeldOutput && c.heldOutLen > 0 {
		c.cond.Wait()
	}
	if c.asking {
		c.heldOut = append(c.heldOut, strings.Clone(text)) // text may be the caller's buffer
		c.heldOutLen += len(text)
		return
	}
	c.writeOutLocked(text)
}

func (c *console) writeOutLocked(text string) {
	c.prog.hide()
	_, _ = io.WriteString(c.out, text)
	c.midLine = !strings.HasSuffix(text, "\n")
	c.prog.show()
}

// beginQuestion clears the screen area fledge owns so the form has the terminal to itself.
func (c *console) beginQuestion() {
	c.lock()
	defer c.unlock()
	c.prog.hide()
	if c.midLine && c.ttyOut {
		_, _ = io.WriteString(c.out, "\n")
		c.midLine = false
	}
	c.asking = true
}

// endQuestion writes what waited during the question and brings progress back.
func (c *console) endQuestion(echo string) {
	c.lock()
	defer c.unlock()
	c.asking = false
	if echo != "" {
		_, _ = io.WriteString(c.err, echo)
	}
	c.flushHeldLocked()
	c.prog.show()
	c.cond.Broadcast()
}

func (c *console) flushHeldLocked() {
	for _, s := range c.heldLogs {
		_, _ = io.WriteString(c.err, s)
	}
	if c.dropped > 0 {
		_, _ = fmt.Fprintf(c.err, "fledge: warning: %d plugin log lines dropped while a prompt was open\n", c.dropped)
	}
	c.heldLogs, c.dropped = nil, 0
	for _, s := range c.heldOut {
		_, _ = io.WriteString(c.out, s)
		c.midLine = !strings.HasSuffix(s, "\n")
	}
	c.heldOut, c.heldOutLen = nil, 0
}

func (c *console) Close() {
	c.releaseHeld()
	c.lock()
	defer c.unlock()
	c.prog.stop()
	c.flushHeldLocked()
	c.closed = true
	c.cond.Broadcast()
}

// lock takes the terminal; unlock releases it after drawing any progress update that
// arrived meanwhile (Progress never waits for the lock, it leaves its update behind).
func (c *console) lock() { c.mu.Lock() }

func (c *console) unlock() {
	for {
		c.prog.drainLocked()
		c.mu.Unlock()
		if !c.prog.pendingUpdate() || !c.mu.TryLock() {
			return
		}
	}
}
