// SPDX-License-Identifier: MIT

// Package headless drives a real headless Chromium through its DevTools protocol over
// --remote-debugging-pipe (no dependency beyond the standard library): load a page, wait
// for it, evaluate an expression in it, take a screenshot, and collect every console
// message, exception, log entry and network request the page caused.
package headless

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/ui/clip"
)

// Find returns the Chromium binary (Debian's chromium or chromium-headless-shell), or "".
func Find() string {
	for _, n := range []string{"chromium", "chromium-headless-shell", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// Browser is one Chromium process with one page.
type Browser struct {
	cmd     *exec.Cmd
	in      *os.File // our end: commands to the browser (its fd 3)
	out     *os.File // our end: its replies and events (its fd 4)
	nextID  atomic.Int64
	mu      sync.Mutex
	waiters map[int64]chan msg
	session string
	events  []Event
	done    chan struct{}
}

// Event is a DevTools event the page raised.
type Event struct {
	Method string
	Params json.RawMessage
}

type msg struct {
	ID        int64                     `json:"id,omitempty"`
	Method    string                    `json:"method,omitempty"`
	Params    json.RawMessage           `json:"params,omitempty"`
	Result    json.RawMessage           `json:"result,omitempty"`
	Error     *struct{ Message string } `json:"error,omitempty"`
	SessionID string                    `json:"sessionId,omitempty"`
}

// Start runs Chromium headless with a fresh profile in dir, and opens one blank page with
// the Runtime, Log, Network and Page domains on.
func Start(ctx context.Context, bin, dir string, width, height int) (*Browser, error) {
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--mute-audio", "--hide-scrollbars", "--user-data-dir="+dir, "--remote-debugging-pipe",
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, evW} // fd 3: it reads commands; fd 4: it writes
	var stderr bytes.Buffer
	cmd.Stderr = &limited{b: &stderr, n: 64 << 10}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	cmdR.Close()
	evW.Close()
	b := &Browser{cmd: cmd, in: cmdW, out: evR, waiters: map[int64]chan msg{}, done: make(chan struct{})}
	go b.read()
	go func() { cmd.Wait(); close(b.done) }()
	var t struct{ TargetID string }
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &t); err != nil {
		b.Close()
		return nil, fmt.Errorf("%w (chromium: %s)", err, stderr.String())
	}
	var a struct{ SessionID string }
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": t.TargetID, "flatten": true}, &a); err != nil {
		b.Close()
		return nil, err
	}
	b.session = a.SessionID
	for _, d := range []string{"Runtime.enable", "Log.enable", "Network.enable", "Page.enable"} {
		if err := b.Call(ctx, d, nil, nil); err != nil {
			b.Close()
			return nil, err
		}
	}
	err = b.Call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b, err
}

type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *Browser) read() {
	r := bufio.NewReaderSize(b.out, 1<<20)
	for {
		data, err := r.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, w := range b.waiters {
				close(w)
				delete(b.waiters, id)
			}
			b.mu.Unlock()
			return
		}
		var m msg
		if json.Unmarshal(data[:len(data)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if w := b.waiters[m.ID]; w != nil {
				w <- m
				delete(b.waiters, m.ID)
			}
		} else if m.Method != "" && len(b.events) < 100_000 {
			b.events = append(b.events, Event{m.Method, m.Params})
		}
		b.mu.Unlock()
	}
}

func (b *Browser) call(ctx context.Context, session, method string, params any, result any) error {
	id := b.nextID.Add(1)
	if params == nil {
		params = map[string]any{}
	}
	req, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params, "sessionId": session})
	if session == "" {
		req, err = json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	}
	if err != nil {
		return err
	}
	w := make(chan msg, 1)
	b.mu.Lock()
	b.waiters[id] = w
	b.mu.Unlock()
	if _, err := b.in.Write(append(req, 0)); err != nil {
		return err
	}
	select {
	case m, ok := <-w:
		if !ok {
			return errors.New("headless: chromium went away")
		}
		if m.Error != nil {
			return fmt.Errorf("headless: %s: %s", method, m.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("headless: %s: %w", method, ctx.Err())
	}
}

// Call sends a command to the page's session.
func (b *Browser) Call(ctx context.Context, method string, params, result any) error {
	return b.call(ctx, b.session, method, params, result)
}

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(ctx context.Context, url string) error {
	b.mu.Lock()
	n := len(b.events)
	b.mu.Unlock()
	var r struct{ ErrorText string }
	if err := b.Call(ctx, "Page.navigate", map[string]any{"url": url}, &r); err != nil {
		return err
	}
	if r.ErrorText != "" {
		return fmt.Errorf("headless: navigate %s: %s", url, r.ErrorText)
	}
	for {
		b.mu.Lock()
		for _, e := range b.events[n:] {
			if e.Method == "Page.loadEventFired" {
				b.mu.Unlock()
				return nil
			}
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("headless: waiting for the load of %s: %w", url, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise) into result.
func (b *Browser) Eval(ctx context.Context, expr string, result any) error {
	var r struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails *struct{ Text string }
	}
	if err := b.Call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("headless: eval %q: %s", expr, r.ExceptionDetails.Text)
	}
	if result == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, result)
}

// WaitFor polls expr until it is true.
func (b *Browser) WaitFor(ctx context.Context, expr string) error {
	for {
		var ok bool
		if err := b.Eval(ctx, "!!("+expr+")", &ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("headless: waiting for %s: %w", expr, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// Screenshot returns a PNG of the whole page (up to maxHeight pixels tall).
func (b *Browser) Screenshot(ctx context.Context, width, maxHeight int) ([]byte, error) {
	var h float64
	if err := b.Eval(ctx, "document.documentElement.scrollHeight", &h); err != nil {
		return nil, err
	}
	height := min(int(h), maxHeight)
	var r struct{ Data string }
	err := b.Call(ctx, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}, &r)
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

// Events returns the events seen so far.
func (b *Browser) Events() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Event(nil), b.events...)
}

// Problems returns every console message of level warning or error, uncaught exception,
// log entry of level warning or error (CSP violations among them), and every network
// request for a URL other than those allowed, as text.
func (b *Browser) Problems(allowed ...string) []string {
	var out []string
	for _, e := range b.Events() {
		switch e.Method {
		case "Runtime.consoleAPICalled":
			var p struct {
				Type string
				Args []struct {
					Value       any
					Description string
				}
			}
			json.Unmarshal(e.Params, &p)
			if p.Type == "error" || p.Type == "warning" || p.Type == "assert" {
				out = append(out, fmt.Sprintf("console %s: %s", p.Type, e.Params))
			}
		case "Runtime.exceptionThrown":
			out = append(out, "exception: "+string(e.Params))
		case "Log.entryAdded":
			var p struct {
				Entry struct{ Level, Source, Text, URL string }
			}
			json.Unmarshal(e.Params, &p)
			if p.Entry.Level == "error" || p.Entry.Level == "warning" {
				out = append(out, fmt.Sprintf("log %s (%s): %s %s", p.Entry.Level, p.Entry.Source, p.Entry.Text, p.Entry.URL))
			}
		case "Network.requestWillBeSent":
			var p struct{ Request struct{ URL, Method string } }
			json.Unmarshal(e.Params, &p)
			ok := false
			for _, a := range allowed {
				if p.Request.URL == a || (strings.HasSuffix(a, "*") && strings.HasPrefix(p.Request.URL, strings.TrimSuffix(a, "*"))) {
					ok = true
				}
			}
			if !ok {
				out = append(out, fmt.Sprintf("request: %s %s", p.Request.Method, clip.Mark(p.Request.URL, 300, "…")))
			}
		}
	}
	return out
}

// Close ends the browser.
func (b *Browser) Close() {
	b.in.Close()
	select {
	case <-b.done:
	case <-time.After(3 * time.Second):
		b.cmd.Process.Kill()
		<-b.done
	}
	b.out.Close()
}
