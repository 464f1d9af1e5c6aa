// SPDX-License-Identifier: MIT

package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

// Path is where `serve --mcp --listen` answers MCP's Streamable HTTP transport.
const Path = "/mcp"

// Bounds of the Streamable HTTP server.
const (
	// DefaultMaxSessions is how many client sessions may be open at once.
	DefaultMaxSessions = 8
	// DefaultSessionIdle ends a client session that sent no request for this long.
	DefaultSessionIdle = 30 * time.Minute
	// shutdownWait bounds the graceful end of the listener before its connections are cut.
	shutdownWait = 5 * time.Second
)

// ErrTooManySessions: a client asked for a session while the bound is reached.
var ErrTooManySessions = errors.New("too many MCP client sessions")

// HTTPOptions configure ServeHTTP.
type HTTPOptions struct {
	// Listener is where to serve; the caller bound it (loopback, or public with TLS).
	Listener net.Listener
	// CertFile and KeyFile, when set, serve TLS.
	CertFile, KeyFile string
	// Token is the bearer token every request must carry.
	Token string
	// Origins are the Origin header values a request may carry (the listener's own, in
	// lower case); a request with any other Origin is refused (403), one with none is a
	// client that is not a browser.
	Origins []string
	// MaxSessions bounds the client sessions open at once (DefaultMaxSessions when 0).
	MaxSessions int
	// MaxBodyBytes bounds one request body (policy's line_max: one message, as on stdio).
	MaxBodyBytes int64
	// SessionIdle ends an idle client session (DefaultSessionIdle when 0).
	SessionIdle time.Duration
	// Session makes what one client session serves: its own catalogue (its plugins, its
	// project from its roots) and options; done is called when the session has ended.
	Session func() (cat *tools.Catalogue, so ServeOptions, done func(), err error)
	// Log receives the client_session_start and client_session_end records.
	Log audit.Recorder
	// Warn receives what the user should know.
	Warn func(string)
}

// ServeHTTP runs fledge as an MCP server over Streamable HTTP on o.Listener until ctx ends.
// Each client session (an initialize without Mcp-Session-Id) gets its own server from
// Serve, with its own catalogue: its plugins, and the project its roots name. Every
// request must carry the bearer token (else 401) and no foreign Origin (else 403, the
// spec's defence against DNS rebinding); bodies, sessions and idle time are bounded.
func ServeHTTP(ctx context.Context, o HTTPOptions) error {
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = DefaultSessionIdle
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = mcpsdk.DefaultMaxRequestBodyBytes
	}
	if o.Warn == nil {
		o.Warn = func(string) {}
	}
	if o.Token == "" {
		return errors.New("serve over HTTP needs a bearer token")
	}
	h := &httpServer{o: o, ctx: ctx, token: sha256.Sum256([]byte(o.Token)), origins: map[string]bool{}}
	for _, og := range o.Origins {
		h.origins[strings.ToLower(og)] = true
	}
	h.sdk = mcpsdk.NewStreamableHTTPHandler(h.newServer, &mcpsdk.StreamableHTTPOptions{
		Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
		SessionTimeout:      o.SessionIdle,
		MaxRequestBodyBytes: o.MaxBodyBytes,
	})
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
		// A client's broken TLS handshake or request is its own business: nothing of it
		// reaches fledge's stderr.
		ErrorLog:    log.New(io.Discard, "", 0),
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	srvDone := make(chan error, 1)
	go func() {
		if o.CertFile != "" {
			srvDone <- srv.ServeTLS(o.Listener, o.CertFile, o.KeyFile)
		} else {
			srvDone <- srv.Serve(o.Listener)
		}
	}()
	var err error
	select {
	case err = <-srvDone:
	case <-ctx.Done():
	}
	// Each session ends with ctx (its server is closed, its plugins shut down); the
	// listener ends gracefully first, then whatever still hangs is cut.
	sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		_ = srv.Close()
	}
	h.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

type httpServer struct {
	o       HTTPOptions
	ctx     context.Context
	token   [32]byte
	origins map[string]bool
	sdk     *mcpsdk.StreamableHTTPHandler

	mu   sync.Mutex
	live int
	wg   sync.WaitGroup
}

// slot is a reserved place for a new client session, carried to newServer in the
// request's context.
type slot struct {
	used bool
	// srv is the session's server: the SDK handler asks for it more than once per
	// request (for its protocol versions, then to connect it).
	srv *mcpsdk.Server
	// served is closed once the SDK handler answered the request that opened the
	// session: by then it has connected the session's server (or failed to).
	served chan struct{}
}

type slotKey struct{}

func (h *httpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.Error(w, "fledge: the MCP endpoint is "+Path, http.StatusNotFound)
		return
	}
	if og := r.Header.Get("Origin"); og != "" && !h.origins[strings.ToLower(og)] {
		http.Error(w, "fledge: requests from another origin are refused (Origin "+clip.Bytes(og, 120)+")", http.StatusForbidden)
		return
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fledge"`)
		http.Error(w, "fledge: a valid bearer token is required (Authorization: Bearer <token>)", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
		h.sdk.ServeHTTP(w, r)
		return
	}
	// A POST without a session id opens a client session, and only an initialize does:
	// the body is read here (bounded) so nothing else starts a session's plugins.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("fledge: a request body is at most %d bytes (line_max)", mbe.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "fledge: the request body could not be read", http.StatusBadRequest)
		return
	}
	if msg, derr := jsonrpc.DecodeMessage(body); derr != nil {
		http.Error(w, "fledge: a new MCP session starts with an initialize request", http.StatusBadRequest)
		return
	} else if req, ok := msg.(*jsonrpc.Request); !ok || req.Method != "initialize" {
		http.Error(w, "fledge: a new MCP session starts with an initialize request", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	// A place is reserved first, so the bound holds however many arrive at once.
	h.mu.Lock()
	if h.live >= h.o.MaxSessions {
		h.mu.Unlock()
		http.Error(w, fmt.Sprintf("fledge: %v: at most %d at once (end one with DELETE, or wait for one idle for %s to end)", ErrTooManySessions, h.o.MaxSessions, h.o.SessionIdle), http.StatusServiceUnavailable)
		return
	}
	h.live++
	h.mu.Unlock()
	s := &slot{served: make(chan struct{})}
	h.sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), slotKey{}, s)))
	close(s.served)
	if !s.used {
		h.release()
	}
}

func (h *httpServer) release() {
	h.mu.Lock()
	h.live--
	h.mu.Unlock()
}

// authorized: the request carries the bearer token (compared in constant time, as hashes
// so that the length is not told either).
func (h *httpServer) authorized(r *http.Request) bool {
	v := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(v) <= len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(v[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], h.token[:]) == 1
}

// newServer is the SDK handler's getServer: one new Serve per client session, running
// until the session ends (the client's DELETE, its idle time out, or the end of ctx).
func (h *httpServer) newServer(r *http.Request) *mcpsdk.Server {
	s, _ := r.Context().Value(slotKey{}).(*slot)
	if s == nil {
		return nil // a request of a session that exists: the SDK's own versions apply
	}
	if s.used {
		return s.srv
	}
	s.used = true
	cat, so, done, err := h.o.Session()
	if err != nil {
		h.o.Warn(fmt.Sprintf("serve --mcp: a client session could not start: %v", err))
		h.release()
		return nil
	}
	id := core.NewSessionID()
	remote := r.RemoteAddr
	got := make(chan *mcpsdk.Server, 1)
	ended := make(chan struct{})
	sctx, cancel := context.WithCancel(h.ctx)
	var calls atomic.Int64
	so.Run = func(_ context.Context, srv *mcpsdk.Server) error {
		// How many tool calls the client made is on its session's end record (each call
		// is on record in its plugin's session too).
		srv.AddReceivingMiddleware(func(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
			return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
				if method == "tools/call" {
					calls.Add(1)
				}
				return next(ctx, method, req)
			}
		})
		got <- srv
		return h.run(sctx, cancel, srv, s.served, id, remote, &calls)
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer h.release()
		defer close(ended)
		defer cancel()
		if err := Serve(sctx, cat, nil, nil, so); err != nil && sctx.Err() == nil {
			h.o.Warn(fmt.Sprintf("serve --mcp: client session %s: %v", id, err))
		}
		done()
	}()
	select {
	case s.srv = <-got:
	case <-ended:
	}
	return s.srv
}

// run waits for the SDK to connect srv to the client's session, records its start, and
// waits for its end (or ctx's), which it records too.
func (h *httpServer) run(ctx context.Context, cancel context.CancelFunc, srv *mcpsdk.Server, served <-chan struct{}, id, remote string, calls *atomic.Int64) error {
	defer cancel() // calls still in flight end with the session
	select {
	case <-served:
	case <-ctx.Done():
		return nil
	}
	var ss *mcpsdk.ServerSession
	for s := range srv.Sessions() {
		ss = s
	}
	if ss == nil {
		return nil // not connected, or its initialize failed and it was closed at once
	}
	start := time.Now()
	h.record(audit.EventClientSessionStart, id, map[string]any{"transport": "streamable-http", "remote": remote})
	waitc := make(chan error, 1)
	go func() { waitc <- ss.Wait() }()
	how := "closed"
	select {
	case <-waitc:
	case <-ctx.Done():
		how = "shutdown"
		_ = ss.Close()
		<-waitc
	}
	d := map[string]any{"transport": "streamable-http", "remote": remote, "ended": how, "duration_ms": time.Since(start).Milliseconds(), "tool_calls": calls.Load()}
	if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil {
		d["client_name"] = clip.Bytes(p.ClientInfo.Name, 128)
		d["client_version"] = clip.Bytes(p.ClientInfo.Version, 64)
	}
	h.record(audit.EventClientSessionEnd, id, d)
	return nil
}

func (h *httpServer) record(event, id string, details map[string]any) {
	if h.o.Log == nil {
		return
	}
	if err := h.o.Log.Append(&audit.Record{Session: id, Event: event, Decision: audit.Allow, Reason: string(reason.OK), Details: details}, false); err != nil {
		h.o.Warn(fmt.Sprintf("serve --mcp: the audit log refused a record: %v", err))
	}
}
