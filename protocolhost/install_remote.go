// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/mcp"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

// runRemote installs an http(s) URL that answers MCP's initialize as a protocol =
// "mcp-remote" plugin; handled is false when the URL is no MCP server (it is then tried
// as a git URL, as before). The token, when --secret NAME names one, comes from fledge's
// secrets store and is sent to that URL's origin only.
func (in *installer) runRemote(ctx context.Context, o *InstallRequest, base plugin.InstallOptions) (handled bool, err error) {
	e := in.h.Env
	p := o.Package
	tokenSecret := ""
	switch len(p.Secrets) {
	case 0:
	case 1:
		tokenSecret = policy.SecretName(p.Secrets[0])
	default:
		return true, exitErr(ExitUsage, "install %s: a remote MCP server takes one --secret (its bearer token)", policy.StripURLCredentials(o.Source))
	}
	if p.Version != "" || p.Bin != "" || len(p.Env) > 0 || p.Network || p.Filesystem != "" || len(p.ServerArgs) > 0 {
		return false, nil // an npm package's flags: not asked for as a remote server
	}
	token := ""
	if tokenSecret != "" {
		v, ok, lerr := plugin.LookupSecret(e.StateDir, tokenSecret)
		if lerr != nil {
			return true, exitErr(ExitUsage, "install %s: --secret: %v", policy.StripURLCredentials(o.Source), lerr)
		}
		if !ok {
			return true, exitErr(ExitUsage, "install %s: secret %s is not set (fledge secrets set %s)", policy.StripURLCredentials(o.Source), tokenSecret, tokenSecret)
		}
		_ = e.Redactor().Add(tokenSecret, v)
		token = v
	}
	// Only an MCP server answers initialize: anything else (a git host) is left to git.
	info, _, perr := mcp.ProbeRemote(ctx, o.Source, token)
	if perr != nil {
		if tokenSecret != "" || p.Name != "" {
			// Asked for as a remote server: say why it is not one rather than try git.
			return true, exitErr(ExitCannotRun, "install %s: %v", policy.StripURLCredentials(o.Source), e.Redactor().Redact(perr.Error()))
		}
		return false, nil
	}
	src := policy.StripURLCredentials(o.Source)
	if _, err := plugin.CheckRemoteURL(o.Source); err != nil {
		_ = e.NewRecorder(in.log, nil, nil).RecordNow(audit.EventInstall, audit.Deny, reason.CapabilityNotGranted, map[string]any{"source": src, "error": err.Error()})
		return true, exitErr(ExitUsage, "install %s: %v", src, err)
	}
	name := p.Name
	if name == "" {
		name = plugin.RemoteName(info.Name, o.Source)
	}
	if !plugin.ValidName(name) {
		return true, exitErr(ExitUsage, "install %s: --name %q is not a plugin name", src, name)
	}
	tmp, err := fetchDir(e.ConfigDir, ".fetch-remote-")
	if err != nil {
		return true, err
	}
	defer os.RemoveAll(tmp)
	desc := "the remote MCP server at " + src
	if info.Title != "" {
		desc = info.Title + " (" + desc + ")"
	}
	if _, err := plugin.WriteRemoteManifest(tmp, plugin.RemoteRequest{URL: o.Source, Name: name, Version: info.Version, Description: desc, TokenSecret: tokenSecret}); err != nil {
		return true, exitErr(ExitUsage, "install %s: %v", src, err)
	}
	fmt.Fprintf(in.errOut, "%s answers MCP's initialize: installing it as remote MCP server %s (fledge connects to it itself; no process of it runs here).\n", src, name)
	base.Source = tmp
	base.RecordSource = src
	base.RunHooks = false
	base.Handshake = nil
	var listed []tools.Tool
	base.Verify = in.verifyServer(false, false, &listed)
	if err := in.installOne(ctx, base); err != nil {
		return true, err
	}
	if listed != nil {
		in.showTools(name, listed)
	}
	return true, nil
}

// remoteSource: an https URL, or an http one to loopback, that is not obviously a git
// repository (….git). A plain http:// URL elsewhere is never asked anything in clear: it
// is a git remote as before.
func remoteSource(s string) bool {
	if !plugin.IsHTTPURL(s) {
		return false
	}
	if _, err := plugin.CheckRemoteURL(s); err != nil {
		return false
	}
	path := s
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	return !strings.HasSuffix(strings.TrimSuffix(path, "/"), ".git")
}
