// SPDX-License-Identifier: MIT

package report

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fledgehq/fledge/audit"
)

// ErrNotLoopback refuses a listen address that is not a loopback address: the page shows
// the whole audit log, and audit ui has no login beyond the token in its URL.
var ErrNotLoopback = errors.New("audit ui listens on a loopback address only (127.0.0.1, ::1, localhost)")

// CheckListen checks that addr (host:port) names a loopback address.
func CheckListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrNotLoopback, addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%w: %q: bad port", ErrNotLoopback, addr)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w, not %q", ErrNotLoopback, host)
	}
	return nil
}

// NewToken returns a random token for the URL (128 bits, hex).
func NewToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// maxStreams bounds the live event streams served at once.
const maxStreams = 8

// writeTimeout bounds each write to a client: one that stops reading is dropped.
const writeTimeout = 10 * time.Second

// Handler serves the page at /TOKEN/ and its live rows at /TOKEN/events, to GET and HEAD
// only; anything else gets no page.
type Handler struct {
	Options Options
	Token   string
	// Interval is how often the live stream looks for new records (0: the Follow default).
	Interval time.Duration
	// ErrLog receives errors met after a response started (nil: dropped).
	ErrLog  io.Writer
	streams chan struct{}
}

// NewHandler returns the handler of audit ui.
func NewHandler(o Options, token string) *Handler {
	o.EventsURL = "events"
	return &Handler{Options: o, Token: token, streams: make(chan struct{}, maxStreams)}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP(true)+"; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "audit ui is read-only: GET and HEAD only", http.StatusMethodNotAllowed)
		return
	}
	// A page of another site cannot reach it by a name that resolves to 127.0.0.1 (DNS
	// rebinding): the Host must be a loopback name.
	if !loopbackHost(r.Host) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/")
	tok, sub, _ := strings.Cut(rest, "/")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(h.Token)) != 1 {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	switch sub {
	case "":
		h.page(w, r)
	case "events":
		h.events(w, r)
	default:
		http.Error(w, "not found", http.StatusNotFound)
	}
}

func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	o := h.Options
	o.Now = time.Now()
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(5 * time.Minute))
	if _, err := Write(w, o); err != nil && h.ErrLog != nil {
		fmt.Fprintf(h.ErrLog, "audit ui: %v\n", err)
	}
}

// events streams the rows of records after ?after=SEQ as server-sent events, as audit show
// --follow prints them, until the client goes away.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	select {
	case h.streams <- struct{}{}:
		defer func() { <-h.streams }()
	default:
		http.Error(w, "too many live views open", http.StatusServiceUnavailable)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	send := func(write func() error) error {
		if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if err := write(); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(func() error { _, err := io.WriteString(w, ": fledge audit ui\n\n"); return err }); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	err := audit.Follow(ctx, h.Options.Path, h.Options.Filter, audit.FollowOptions{Interval: h.Interval}, func(rec *audit.Record) error {
		if rec.Seq <= after {
			return nil
		}
		return send(func() error { return WriteEvent(w, rec) })
	})
	if err != nil && ctx.Err() == nil && h.ErrLog != nil {
		fmt.Fprintf(h.ErrLog, "audit ui: live: %v\n", err)
	}
}
