// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

var (
	// ErrRemoteNotGranted: a remote server's destination (or its token's secret) is not
	// granted to the plugin.
	ErrRemoteNotGranted = errors.New("remote MCP server not granted")
	// ErrCrossOriginRedirect: a remote server redirected to another origin; fledge does not
	// follow (its token would go there).
	ErrCrossOriginRedirect = errors.New("redirect to another origin not followed")
	// ErrNotMCPServer: a URL did not answer MCP's initialize.
	ErrNotMCPServer = errors.New("not an MCP server")
)

// probeWait bounds how long a URL has to answer initialize at install.
const probeWait = 15 * time.Second

// probeMaxBody bounds an answer to the install's initialize.
const probeMaxBody = 1 << 20

// maxRedirects bounds same-origin redirects of one request to a remote server.
const maxRedirects = 5

func init() {
	// One provider for local and remote servers: serve --mcp's prompts, resources and
	// logging see every MCP session of the invocation.
	tools.RegisterAlias(plugin.ProtocolMCPRemote, plugin.ProtocolMCP)
}

// remoteState is what a remote server's session has instead of a process.
type remoteState struct {
	gone chan struct{} // closed when the client session ended
	url  string        // without credentials, for records
}

// done is closed when the server is gone: its process ended, or the remote session did.
func (s *session) done() <-chan struct{} {
	if s.remote != nil {
		return s.remote.gone
	}
	return s.proc.Done()
}

// cause is why fledge ended the connection (a bound, a violation), or nil.
func (s *session) cause() error {
	if s.conn == nil {
		return nil
	}
	return s.conn.Cause()
}

// remoteClient is the HTTP client fledge talks to one remote server with: the token goes
// in requests to the server's own origin only, a redirect to another origin is not
// followed, no proxy from the environment is used (the token would go through it).
func remoteClient(rawURL, token string, maxBody int64) (*http.Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	origin := origin(u)
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil
	base.ResponseHeaderTimeout = 0
	base.MaxResponseHeaderBytes = 64 << 10
	return &http.Client{
		Transport: &tokenTransport{base: base, origin: origin, token: token, maxBody: maxBody},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if origin != originOf(req.URL) {
				return fmt.Errorf("%w (%s)", ErrCrossOriginRedirect, originOf(req.URL))
			}
			if len(via) >= maxRedirects {
				return fmt.Errorf("more than %d redirects", maxRedirects)
			}
			return nil
		},
	}, nil
}

func origin(u *url.URL) string { return originOf(u) }

// originOf is scheme://host:port in lower case, the port made explicit.
func originOf(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// tokenTransport puts the bearer token in requests to origin, and only there.
type tokenTransport struct {
	base    http.RoundTripper
	origin  string
	token   string
	maxBody int64
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if originOf(req.URL) != t.origin {
		// Nothing reaches another origin: redirects are checked too, this is the floor.
		return nil, fmt.Errorf("%w (%s)", ErrCrossOriginRedirect, originOf(req.URL))
	}
	if t.token != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	// The SDK reads a JSON answer (and an error's body) whole: bounded here, as a stdio
	// line is; an event stream's events are bounded by MaxEventSize.
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" && t.maxBody > 0 {
		resp.Body = &cappedBody{r: resp.Body, left: t.maxBody}
	}
	return resp, nil
}

// ErrResponseTooLarge: a remote server's answer is over line_max.
var ErrResponseTooLarge = errors.New("remote MCP server's answer is over line_max")

// cappedBody fails a read past its bound instead of holding more.
type cappedBody struct {
	r    io.ReadCloser
	left int64
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left <= 0 && err == nil {
		// One byte more tells a body that ends exactly at the bound from a longer one.
		var one [1]byte
		if m, _ := c.r.Read(one[:]); m > 0 {
			return n, ErrResponseTooLarge
		}
	}
	return n, err
}

func (c *cappedBody) Close() error { return c.r.Close() }

// ProbeRemote asks rawURL for MCP's initialize (with the token when one is given) and
// returns the server's implementation; ErrNotMCPServer when it does not answer as one.
func ProbeRemote(ctx context.Context, rawURL, token string) (*mcpsdk.Implementation, string, error) {
	hc, err := remoteClient(rawURL, token, probeMaxBody)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrNotMCPServer, err)
	}
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "fledge", Version: core.FledgeVersion()}, &mcpsdk.ClientOptions{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	cs, err := client.Connect(ctx, &mcpsdk.StreamableClientTransport{Endpoint: rawURL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrNotMCPServer, err)
	}
	defer cs.Close()
	r := cs.InitializeResult()
	if r == nil || r.ServerInfo == nil {
		return &mcpsdk.Implementation{}, "", nil
	}
	return r.ServerInfo, r.Instructions, nil
}

// startRemote connects to a protocol = "mcp-remote" plugin's server: fledge itself is the
// client (no process of the plugin's runs, no sandbox is involved), to the granted
// destination only, with the token of the bound secret; its tools then go through the same
// pins, policy, hooks and records as a local server's.
func (p *Provider) startRemote(ctx context.Context, b *core.Binding) (*session, error) {
	env := p.host.Env
	log, err := env.Audit()
	if err != nil {
		return nil, err
	}
	rec := env.NewRecorder(log, b.Ref, p.warn)
	rawURL := b.Manifest.Remote.URL
	shown := policy.StripURLCredentials(rawURL)
	details := map[string]any{"protocol": plugin.ProtocolMCPRemote, "url": shown, "grants": b.Entry.Granted}
	dest, err := plugin.CheckRemoteURL(rawURL)
	if err != nil {
		rec.Record(audit.EventPluginStart, audit.Deny, reason.LaunchFailed, withErr(details, err), true)
		return nil, err
	}
	details["destination"] = dest
	g := b.Entry.Granted
	if !g.Network && !slices.Contains(g.NetworkTo, dest) {
		err := fmt.Errorf("%w: plugin %s may not reach %s (fledge plugins grant %s network=%s)", ErrRemoteNotGranted, b.Entry.Name, dest, b.Entry.Name, dest)
		rec.Record(audit.EventPluginStart, audit.Deny, reason.CapabilityNotGranted, withErr(details, err), true)
		return nil, err
	}
	token, err := p.remoteToken(b, rec, details)
	if err != nil {
		return nil, err
	}
	lim := env.Config.SessionLimits()
	callTimeout, terr := policy.CallTimeout(b.Manifest.Plugin.Timeout, lim)
	if terr != nil {
		p.warn(fmt.Sprintf("plugin %s: %v", b.Entry.Name, terr))
	}
	hc, err := remoteClient(rawURL, token, int64(lim.LineMax))
	if err != nil {
		return nil, err
	}
	// Before anything is sent: the connection is on record.
	if err := rec.RecordNow(audit.EventPluginStart, audit.Allow, reason.OK, details); err != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrAudit, err)
	}
	s := &session{
		name: b.Entry.Name, rec: rec, callTimeout: callTimeout, userErr: p.stderr(),
		argValues: env.Config.Audit.ToolArgumentValues,
		schemas:   map[string]*jsonschema.Resolved{},
		remote:    &remoteState{gone: make(chan struct{}), url: shown},
	}
	// The same client as a local server's, but no roots: a remote server is offered no
	// path of this machine. Sampling and elicitation as granted.
	caps := &mcpsdk.ClientCapabilities{}
	if g.Sampling {
		caps.Sampling = &mcpsdk.SamplingCapabilities{}
	}
	if g.Elicitation {
		caps.Elicitation = &mcpsdk.ElicitationCapabilities{Form: &mcpsdk.FormElicitationCapabilities{}}
	}
	s.sampling, s.elicitation = g.Sampling, g.Elicitation
	client := p.newClient(s, b, lim.ExecTimeoutDefault, caps)
	ictx, cancel := context.WithTimeout(ctx, lim.ExecTimeoutDefault)
	defer cancel()
	cs, err := client.Connect(ictx, &mcpsdk.StreamableClientTransport{
		Endpoint: rawURL, HTTPClient: hc, MaxEventSize: int(lim.LineMax),
	}, nil)
	if err != nil {
		err = fmt.Errorf("%w: plugin %s: %s: %v", ErrHandshake, b.Entry.Name, shown, env.Redactor().Redact(err.Error()))
		s.exitNote = map[string]any{"handshake_error": err.Error()}
		close(s.remote.gone)
		s.close(string(reason.HandshakeFailed))
		return nil, err
	}
	s.cs = cs
	go func() {
		_ = cs.Wait()
		close(s.remote.gone)
		if s.ready.Load() && !s.closing.Load() {
			p.exited(s)
		}
	}()
	s.ready.Store(true)
	if err := s.listTools(ictx, b, p.warn); err != nil {
		err = fmt.Errorf("%w: plugin %s: %v", ErrHandshake, b.Entry.Name, err)
		s.exitNote = map[string]any{"handshake_error": err.Error()}
		s.close(string(reason.HandshakeFailed))
		return nil, err
	}
	// Prompts, resources and templates, pinned with the tools, as for a local server.
	s.listFeatures(ictx, p.warn)
	if lvl := p.logLevel.Load(); lvl != nil {
		s.setLogLevel(ictx, *lvl)
	}
	return s, nil
}

// remoteToken is the value of a remote plugin's bound token secret ("" when it has none),
// refused and recorded when the secret is not granted or not set. Its value is written
// nowhere: records and messages name it [secret:NAME].
func (p *Provider) remoteToken(b *core.Binding, rec *core.Recorder, details map[string]any) (string, error) {
	ts := b.Manifest.Remote.TokenSecret
	if ts == "" {
		return "", nil
	}
	env := p.host.Env
	if !slices.Contains(policy.SecretNames(b.Entry.Granted.Secrets), ts) {
		err := fmt.Errorf("%w: plugin %s's token secret %s is not granted", ErrRemoteNotGranted, b.Entry.Name, ts)
		rec.Record(audit.EventPluginStart, audit.Deny, reason.CapabilityNotGranted, withErr(details, err), true)
		return "", err
	}
	v, ok, err := plugin.LookupSecret(env.StateDir, ts)
	if err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("secret %s is not set (fledge secrets set %s)", ts, ts)
		}
		rec.Record(audit.EventPluginStart, audit.Deny, reason.LaunchFailed, withErr(details, err), true)
		return "", err
	}
	_ = env.Redactor().Add(ts, v)
	details["token_secret"] = ts
	return v, nil
}

// closeRemote ends a remote session (the SDK's DELETE of it) and records its end.
func (s *session) closeRemote(by string) {
	s.closing.Store(true)
	if s.cs != nil {
		_ = s.cs.Close()
	}
	extra := map[string]any{"protocol": plugin.ProtocolMCPRemote, "url": s.remote.url, "ended": by}
	s.exitMu.Lock()
	for k, v := range s.exitNote {
		extra[k] = v
	}
	s.exitMu.Unlock()
	rc, d := reason.OK, audit.Allow
	if by != "shutdown" {
		rc, d = reason.Code(by), audit.Error
		if by == "exited" || by == "bound" {
			rc = reason.Crashed
		}
	}
	s.rec.Record(audit.EventPluginExit, d, rc, extra, false)
}

func withErr(d map[string]any, err error) map[string]any {
	out := make(map[string]any, len(d)+1)
	for k, v := range d {
		out[k] = v
	}
	out["error"] = err.Error()
	return out
}
