// SPDX-License-Identifier: MIT

package ui

import (
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/mattn/go-runewidth"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/fledgehq/fledge/ui/clip"
)

const (
	barScale     = 1000                   // the bar counts in permille; the real numbers are in the text
	barWidth     = 30                     // columns of the bar itself
	barReserve   = barWidth + 24          // bar, percentage, brackets, spinner timer
	drawInterval = 50 * time.Millisecond  // at most ~20 redraws a second, however fast updates come
	tickInterval = 100 * time.Millisecond // spinner frame rate and catch-up for throttled draws
	rawMsgCap    = 16 << 10               // raw progress text looked at before sanitising
)

// progSnap is one progress message, already made safe to show.
type progSnap struct {
	tag, msg string
	cur, tot float64
	nums     bool // a bar (cur/tot known) rather than a spinner
	done     bool
}

// text is the description: plugin tag, message and the numbers as the plugin sent them.
func (s progSnap) text() string {
	t := s.tag
	if s.msg != "" {
		t += " " + s.msg
	}
	if s.nums {
		t += " " + fmtNum(s.cur) + "/" + fmtNum(s.tot)
	}
	return t
}

func (s progSnap) percent() int {
	if !s.nums {
		return -1
	}
	p := int(math.Floor(s.cur / s.tot * 100))
	return min(max(p, 0), 100)
}

func fmtNum(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if len(s) > 16 {
		s = strconv.FormatFloat(v, 'g', 6, 64)
	}
	return s
}

// progress is the progress display. The only state it keeps is the latest update and what
// is on screen, so a plugin flooding progress messages costs neither memory nor waiting:
// Progress stores the update and returns; whoever holds the terminal draws it.
type progress struct {
	c *console

	pmu     sync.Mutex // guards next/hasNext only; never held during I/O
	next    progSnap
	hasNext bool

	// below: under c.mu
	want     progSnap // latest update applied
	active   bool     // something should be on screen (want is not done)
	bar      *progressbar.ProgressBar
	spinner  bool
	drawn    bool // the bar line is on screen
	dirty    bool // want changed since the last draw
	lastDraw time.Time
	lastLine string // non-TTY: last line printed, to print only changes
	lastPct  int
	stopTick chan struct{}
}

func (p *progress) init(c *console) { p.c = c; p.lastPct = -2 }

// Progress implements UI. It never blocks on the terminal: if another goroutine is
// writing, the update is left for it to draw when it lets go.
func (c *console) Progress(plugin, message string, current, total *float64, done bool) {
	s := progSnap{done: done}
	if !done {
		s.tag = pluginTag(plugin)
		s.msg = clip.Mark(oneLine(plainText(clip.Mark(message, rawMsgCap, "…"))), MaxLineBytes, "…")
		if current != nil && total != nil && *total > 0 && !math.IsInf(*total, 0) &&
			!math.IsNaN(*current) && !math.IsInf(*current, 0) {
			s.cur, s.tot, s.nums = min(max(*current, 0), *total), *total, true
		} else if current != nil && !math.IsNaN(*current) && !math.IsInf(*current, 0) {
			s.msg += " " + fmtNum(*current) // a count without a total: shown beside the spinner
		}
	}
	p := &c.prog
	p.pmu.Lock()
	p.next, p.hasNext = s, true
	p.pmu.Unlock()
	if c.mu.TryLock() {
		c.unlock()
	}
}

func (p *progress) pendingUpdate() bool {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	return p.hasNext
}

// drainLocked applies the pending update, if any. Caller holds c.mu.
func (p *progress) drainLocked() {
	p.pmu.Lock()
	s, ok := p.next, p.hasNext
	p.hasNext = false
	p.pmu.Unlock()
	if !ok || p.c.closed {
		return
	}
	p.want, p.active, p.dirty = s, !s.done, true
	if s.done {
		p.lastLine, p.lastPct = "", -2
	}
	p.render(false)
}

// render brings the screen in line with want, unless a question or a half-written output
// line owns the terminal right now (show redraws afterwards).
func (p *progress) render(force bool) {
	c := p.c
	if !c.ttyErr {
		p.renderLine()
		return
	}
	if !p.active {
		p.hide()
		p.dropBar()
		return
	}
	if c.asking || (c.midLine && c.ttyOut) {
		return
	}
	if p.bar == nil || p.spinner != !p.want.nums {
		p.hide()
		p.newBar()
	}
	if !force && time.Since(p.lastDraw) < drawInterval {
		return // throttled: the ticker draws the latest state shortly
	}
	p.draw()
}

// renderLine is the non-TTY display: one plain line per change of message or whole
// percentage, so CI logs show progress without a flood of lines.
func (p *progress) renderLine() {
	if !p.active || p.c.asking {
		return
	}
	line, pct := p.want.tag+" "+p.want.msg, p.want.percent()
	if line == p.lastLine && pct == p.lastPct {
		return
	}
	p.lastLine, p.lastPct = line, pct
	out := p.want.text()
	if pct >= 0 {
		out += " (" + strconv.Itoa(pct) + "%)"
	}
	_, _ = io.WriteString(p.c.err, out+"\n")
}

func (p *progress) newBar() {
	p.spinner = !p.want.nums
	max := int64(barScale)
	if p.spinner {
		max = -1
	}
	p.bar = progressbar.NewOptions64(max,
		progressbar.OptionSetDescription(p.describe()), // no first frame without it
		progressbar.OptionSetWriter(p.c.err),
		progressbar.OptionSetWidth(barWidth),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSpinnerType(14),
		// 0: no goroutine of the library's own; our ticker redraws under the terminal lock
		progressbar.OptionSetSpinnerChangeInterval(0),
	)
	if p.stopTick == nil {
		p.stopTick = make(chan struct{})
		go p.tick(p.stopTick)
	}
}

func (p *progress) dropBar() {
	p.bar = nil
	if p.stopTick != nil {
		close(p.stopTick)
		p.stopTick = nil
	}
}

// describe is want's text cut to fit the terminal beside the bar: a line that wraps
// cannot be cleared with \r.
func (p *progress) describe() string {
	width := 80
	if f := p.c.errFile; f != nil {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			width = w
		}
	}
	return runewidth.Truncate(p.want.text(), max(width-barReserve, 10), "…")
}

// draw writes the bar line for want. Caller holds c.mu.
func (p *progress) draw() {
	if !p.spinner {
		_ = p.bar.Set64(int64(p.want.cur / p.want.tot * barScale))
	}
	p.bar.Describe(p.describe()) // Describe redraws, also once the bar is full
	p.drawn, p.dirty, p.lastDraw = true, false, time.Now()
}

// hide takes the bar line off the screen so something else can be written. Caller holds c.mu.
func (p *progress) hide() {
	if p.bar != nil && p.drawn {
		_ = p.bar.Clear()
		p.drawn = false
	}
}

// show puts progress back after a write or a question. Caller holds c.mu.
func (p *progress) show() {
	if p.c.ttyErr && p.bar == nil && !p.active {
		return
	}
	p.render(true)
}

// stop ends the display for good (Close).
func (p *progress) stop() {
	p.active = false
	p.hide()
	p.dropBar()
}

// tick animates the spinner and draws updates the throttle held back. It skips a beat
// rather than wait for a busy terminal.
func (p *progress) tick(stop chan struct{}) {
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if !p.c.mu.TryLock() {
				continue
			}
			c := p.c
			if p.bar != nil && p.active && !c.asking && !(c.midLine && c.ttyOut) && (p.spinner || p.dirty || !p.drawn) {
				p.draw()
			}
			c.unlock()
		}
	}
}
