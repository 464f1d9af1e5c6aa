// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/policy"
)

// ErrRemoteURL: a remote MCP server's URL is not one fledge connects to.
var ErrRemoteURL = errors.New("not a remote MCP server URL fledge connects to")

// Remote is [remote] of a protocol = "mcp-remote" plugin.
type Remote struct {
	// URL is the server's Streamable HTTP endpoint (https://, or http:// on loopback).
	URL string `toml:"url"`
	// TokenSecret names the secret (fledge secrets) fledge sends as its bearer token, to
	// the URL's origin only; it must be declared (and granted) in [capabilities] secrets.
	TokenSecret string `toml:"token_secret,omitempty"`
}

// CheckRemoteURL checks a remote MCP server URL: https://, or plain http:// only to a
// loopback address (a bearer token never crosses a network in clear); no credentials in
// it, no fragment. It returns the destination (host:port) it is granted as.
func CheckRemoteURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("%w: %q is not an absolute http(s) URL", ErrRemoteURL, clip.Bytes(raw, 80))
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: credentials do not go in the URL (bind a secret with --secret NAME)", ErrRemoteURL)
	}
	if u.Fragment != "" {
		return "", fmt.Errorf("%w: %q has a fragment", ErrRemoteURL, clip.Bytes(raw, 80))
	}
	host := u.Hostname()
	port := u.Port()
	switch strings.ToLower(u.Scheme) {
	case "https":
		if port == "" {
			port = "443"
		}
	case "http":
		if !loopbackHost(host) {
			return "", fmt.Errorf("%w: plain http:// only to a loopback address (127.0.0.1, ::1, localhost); use https:// for %s", ErrRemoteURL, host)
		}
		if port == "" {
			port = "80"
		}
	default:
		return "", fmt.Errorf("%w: scheme %q (want https://, or http:// on loopback)", ErrRemoteURL, u.Scheme)
	}
	return net.JoinHostPort(strings.ToLower(host), port), nil
}

// IsHTTPURL: the source is an http(s) URL (a remote MCP server, or a git remote).
func IsHTTPURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	return ok && (strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https"))
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkRemote: [remote] belongs to mcp-remote plugins, which have one valid URL, no
// commands, and a token secret declared bound to the URL's destination.
func (m *Manifest) checkRemote() error {
	r := m.Remote
	if m.Plugin.Protocol != ProtocolMCPRemote {
		if r.URL != "" || r.TokenSecret != "" {
			return fmt.Errorf("[remote] is for protocol = %q", ProtocolMCPRemote)
		}
		return nil
	}
	if len(m.Commands) > 0 {
		return fmt.Errorf("protocol = %q runs no command: fledge connects to [remote] url", ProtocolMCPRemote)
	}
	if _, err := CheckRemoteURL(r.URL); err != nil {
		return fmt.Errorf("[remote] url: %w", err)
	}
	if r.TokenSecret != "" && !slices.Contains(m.Capabilities.Secrets, r.TokenSecret) {
		return fmt.Errorf("[remote] token_secret %q must be declared in [capabilities] secrets", clip.Bytes(r.TokenSecret, 80))
	}
	return nil
}

// RemoteRequest is a remote MCP server to install as a plugin.
type RemoteRequest struct {
	URL, Name, Version, Description string
	// TokenSecret, when set, is the secret sent as the bearer token.
	TokenSecret string
}

// WriteRemoteManifest writes dir/plugin.toml for r: protocol = "mcp-remote", its URL,
// network to the URL's destination only, and the token secret bound to it.
func WriteRemoteManifest(dir string, r RemoteRequest) (*Manifest, error) {
	dest, err := CheckRemoteURL(r.URL)
	if err != nil {
		return nil, err
	}
	version := r.Version
	if version == "" || badText(version) {
		version = "0.0.0"
	}
	desc := r.Description
	if badText(desc) {
		desc = ""
	}
	caps := Capabilities{Filesystem: policy.FilesystemNone, Network: NetworkCap{To: []string{dest}}}
	if r.TokenSecret != "" {
		if !policy.ValidSecretName(r.TokenSecret) {
			return nil, fmt.Errorf("%w: %q", ErrSecretName, r.TokenSecret)
		}
		// No process holds it: fledge sends it to the URL's origin, and only there.
		caps.Secrets = []string{r.TokenSecret}
	}
	m := struct {
		Plugin       Meta         `toml:"plugin"`
		Remote       Remote       `toml:"remote"`
		Capabilities Capabilities `toml:"capabilities"`
	}{
		Plugin:       Meta{Name: r.Name, Version: clip.Bytes(version, 64), Description: clip.Bytes(desc, 200), Protocol: ProtocolMCPRemote},
		Remote:       Remote{URL: r.URL, TokenSecret: r.TokenSecret},
		Capabilities: caps,
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by fledge for the remote MCP server at %s.\n", policy.StripURLCredentials(r.URL))
	if err := toml.NewEncoder(&b).Encode(m); err != nil {
		return nil, err
	}
	man, _, err := ParseManifest(b.Bytes())
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return man, nil
}

// RemoteName is a plugin name for a remote server: the server's own name when it is a
// valid one, else one made of the URL's host.
func RemoteName(serverName, rawURL string) string {
	n := strings.ToLower(strings.TrimSpace(serverName))
	n = strings.TrimPrefix(n, "mcp-servers/")
	if i := strings.LastIndex(n, "/"); i >= 0 {
		n = n[i+1:]
	}
	n = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, n)
	n = strings.Trim(n, "-_")
	if ValidName(n) {
		return n
	}
	u, err := url.Parse(rawURL)
	if err == nil {
		h := strings.Trim(strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, strings.ToLower(u.Hostname())), "-")
		if ValidName("remote-" + h) {
			return "remote-" + h
		}
	}
	return "remote"
}
