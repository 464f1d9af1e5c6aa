// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/mcp"
	"github.com/fledgehq/fledge/protocolhost/tools"
)

// TokenFileName is the bearer token `serve --mcp --listen` generates, in fledge's state dir.
const TokenFileName = "mcp-http-token"

// maxTokenBytes bounds a --token-file.
const maxTokenBytes = 4096

// ErrListenNotLoopback: --listen names an address that is not loopback without
// --listen-public and TLS.
var ErrListenNotLoopback = errors.New("not a loopback address")

// MCPHTTPOptions is `serve --mcp --listen`.
type MCPHTTPOptions struct {
	Listen            string // host:port
	Public            bool   // --listen-public
	CertFile, KeyFile string // --tls-cert, --tls-key
	TokenFile         string // --token-file (else the generated one)
	MaxSessions       int
	Only              []string
	// Ready is told the URL clients use and the token file, once the listener is bound.
	Ready func(url, tokenFile string)
}

// CheckListen checks --listen, --listen-public and the TLS files before anything runs: a
// non-loopback address needs --listen-public and TLS, and TLS needs both files.
func CheckListen(o MCPHTTPOptions) error {
	host, _, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return exitErr(ExitUsage, "serve --mcp: --listen %q: %v (want HOST:PORT, such as 127.0.0.1:8765)", o.Listen, err)
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return exitErr(ExitUsage, "serve --mcp: --tls-cert and --tls-key go together")
	}
	if !loopbackHost(host) {
		if !o.Public {
			return exitErr(ExitUsage, "serve --mcp: --listen %s: %v: listening beyond this machine needs --listen-public and TLS (--tls-cert, --tls-key)", o.Listen, ErrListenNotLoopback)
		}
		if o.CertFile == "" {
			return exitErr(ExitUsage, "serve --mcp: --listen-public needs TLS (--tls-cert and --tls-key): a bearer token must not cross a network in clear")
		}
	}
	if o.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile); err != nil {
			return exitErr(ExitUsage, "serve --mcp: --tls-cert/--tls-key: %v", err)
		}
	}
	return nil
}

// loopbackHost: an IP literal in the loopback range, or localhost.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServeMCPHTTP serves the catalogue's plugins as an MCP server over Streamable HTTP at
// http(s)://LISTEN/mcp. Each client session has its own catalogue (its own plugin
// processes, its own project from its roots), shut down when the session ends.
func (t *ToolSet) ServeMCPHTTP(ctx context.Context, o MCPHTTPOptions) error {
	if err := CheckListen(o); err != nil {
		return err
	}
	var unknown []string
	for _, n := range o.Only {
		if n = strings.TrimSpace(n); n != "" && !t.Catalogue.HasPluginFor(n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return exitErr(ExitUsage, "serve --mcp: %v: %s (see 'fledge tools list')", mcp.ErrNoSuchTool, strings.Join(unknown, ", "))
	}
	token, tokenFile, err := t.bearerToken(o.TokenFile)
	if err != nil {
		return err
	}
	// Opened once here: client sessions record concurrently.
	log, err := t.h.Env.Audit()
	if err != nil {
		return exitErr(ExitCannotRun, "serve --mcp: %v", err)
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return exitErr(ExitCannotRun, "serve --mcp: %v", err)
	}
	scheme := "http"
	if o.CertFile != "" {
		scheme = "https"
	}
	host, _, _ := net.SplitHostPort(o.Listen)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	origins := []string{scheme + "://" + net.JoinHostPort(host, port)}
	if loopbackHost(host) {
		for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
			origins = append(origins, scheme+"://"+net.JoinHostPort(h, port))
		}
	}
	if o.Ready != nil {
		o.Ready(origins[0]+mcp.Path, tokenFile)
	}
	warn := warnFunc(t.h.stderr())
	err = mcp.ServeHTTP(ctx, mcp.HTTPOptions{
		Listener: ln, CertFile: o.CertFile, KeyFile: o.KeyFile,
		Token: token, Origins: origins, MaxSessions: o.MaxSessions,
		MaxBodyBytes: t.h.Env.Config.Limits.LineMax,
		Log:          log,
		Warn:         warn,
		Session: func() (*tools.Catalogue, mcp.ServeOptions, func(), error) {
			cat, rebind, done := t.clientSession()
			return cat, mcp.ServeOptions{
				Only: o.Only, LineMax: int(t.h.Env.Config.Limits.LineMax), Warn: warn,
				Rebind: rebind, NoRoots: t.noRootsWarning(),
			}, done, nil
		},
	})
	switch {
	case err != nil && ctx.Err() == nil:
		return exitErr(ExitCannotRun, "serve --mcp: %v", err)
	case ctx.Err() != nil:
		return &ExitError{Code: ExitInterrupted}
	}
	return nil
}

// clientSession is one HTTP client session's catalogue of the project fledge was started
// in, the rebind to the project its roots name, and the end that shuts both down.
func (t *ToolSet) clientSession() (*tools.Catalogue, func(string) (*tools.Catalogue, error), func()) {
	var cats []*tools.Catalogue
	var flushes []func()
	newCat := func(proj *project.Info) *tools.Catalogue {
		stderr, flush := pluginStream(t.h.stderr())
		c := tools.NewCatalogue(&tools.Host{Env: t.h.Env, Project: proj, Stderr: stderr}, t.reg)
		c.Hooks = toolHooks{t, c}
		cats = append(cats, c)
		flushes = append(flushes, flush)
		return c
	}
	base := newCat(t.proj)
	rebind := func(root string) (*tools.Catalogue, error) {
		proj, err := project.Detect(root, root)
		if err != nil {
			return nil, err
		}
		return newCat(proj), nil
	}
	done := func() {
		for _, c := range cats {
			_ = c.Close()
		}
		for _, f := range flushes {
			f()
		}
	}
	return base, rebind, done
}

// bearerToken is the token of --token-file (surrounding whitespace trimmed), or the one
// fledge generated in its state dir (made 0600 on first use, kept for the next serve so a
// client's configuration keeps working).
func (t *ToolSet) bearerToken(file string) (string, string, error) {
	if file != "" {
		tok, err := readToken(file)
		if err != nil {
			return "", "", exitErr(ExitUsage, "serve --mcp: --token-file %s: %v", file, err)
		}
		return tok, file, nil
	}
	dir := t.h.Env.StateDir
	if dir == "" {
		return "", "", exitErr(ExitCannotRun, "serve --mcp: fledge has no state directory for its token: pass --token-file")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", exitErr(ExitCannotRun, "serve --mcp: %v", err)
	}
	p := filepath.Join(dir, TokenFileName)
	var b [32]byte
	_, _ = rand.Read(b[:])
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		_, werr := io.WriteString(f, hex.EncodeToString(b[:])+"\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			_ = os.Remove(p)
			return "", "", exitErr(ExitCannotRun, "serve --mcp: writing %s: %v", p, werr)
		}
	case !errors.Is(err, fs.ErrExist):
		return "", "", exitErr(ExitCannotRun, "serve --mcp: %v", err)
	}
	st, err := os.Lstat(p)
	if err != nil {
		return "", "", exitErr(ExitCannotRun, "serve --mcp: %v", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 {
		return "", "", exitErr(ExitCannotRun, "serve --mcp: %s must be a regular file only its owner can read (chmod 600 it, or remove it for a new one)", p)
	}
	tok, err := readToken(p)
	if err != nil {
		return "", "", exitErr(ExitCannotRun, "serve --mcp: %s: %v", p, err)
	}
	return tok, p, nil
}

func readToken(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("longer than %d bytes", maxTokenBytes)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("it holds no token")
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", errors.New("a token is one line")
	}
	return tok, nil
}
