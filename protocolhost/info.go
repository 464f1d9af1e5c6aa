// SPDX-License-Identifier: MIT

package protocolhost

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/protocolhost/jsonrpc"
	"github.com/fledgehq/fledge/sandbox"
)

// PluginInfo is `fledge plugins info`: a plugin's grants and what the sandbox actually
// gives it on this machine under the policy in force.
type PluginInfo struct {
	pi        *plugin.Info
	rep       sandbox.Report
	cfg       *policy.Config
	pa, xa    sandbox.Access
	handshake *jsonrpc.Manifest
	wasm      map[string]any
	pins      *pinState
	// over are the grants over the managed policy's ceiling (runs are refused until
	// they are revoked).
	over []policy.Violation
}

// pinState is how a self-describing plugin's tools stand against their pins.
type pinState struct {
	Pinned  int `json:"pinned"`
	Pending int `json:"changed"`
	// Removed are approved tools the server no longer lists (held for review, not back).
	Removed int    `json:"removed,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Info describes the installed plugin name.
func (h *Host) Info(name string) (*PluginInfo, error) {
	e := h.Env
	pi, err := plugin.GetInfo(e.ConfigDir, name)
	if errors.Is(err, plugin.ErrNotInstalled) {
		return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
	}
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	en := &pi.Entry
	paths := e.Paths(pi.Dir, plugin.DataDir(e.ConfigDir, en.Name), nil)
	paths.ProjectRoot = "<project>"
	info := &PluginInfo{
		pi: pi, rep: e.Sandbox.Report(), cfg: e.Config,
		pa: policy.PluginAccess(paths, en.Granted, e.Config), xa: policy.ExecAccess(paths, e.Config),
		handshake: recordedHandshake(en, pi.Dir),
	}
	if ce := (*policy.CeilingError)(nil); errors.As(e.Config.Managed.CheckPlugin(en.Name, en.Protocol == "", en.Granted, en.Read), &ce) {
		info.over = ce.Items
	}
	if pi.Manifest != nil && pi.Manifest.IsImage() {
		info.pa = policy.ImageAccess(paths, en.Granted, e.Config, en.Read)
	}
	switch en.Protocol {
	case plugin.ProtocolMCP, plugin.ProtocolMCPRemote, plugin.ProtocolJSONRPC:
		info.pins = &pinState{}
		if pf, err := pins.Load(e.ConfigDir, en.Name); err != nil {
			info.pins.Error = err.Error()
		} else if pf != nil {
			info.pins.Pinned = len(pf.Tools)
			for _, p := range pf.Pending {
				if p.Removed {
					info.pins.Removed++
				} else {
					info.pins.Pending++
				}
			}
		}
	}
	if pi.Manifest != nil && pi.Manifest.IsWasm() {
		info.wasm = fledgev1.WasmInfo(e, &en.Granted, plugin.DataDir(e.ConfigDir, en.Name))
	}
	return info, nil
}

// EntryJSON is one installed plugin as `plugins list --json` and `info --json` show it.
func EntryJSON(en *plugin.Entry) map[string]any {
	out := map[string]any{
		"name": en.Name, "version": en.Version, "source": en.Source,
		"installed": en.Installed.UTC().Format(time.RFC3339), "commands": en.Commands,
		"granted": en.Granted, "manifest_sha256": en.ManifestSHA256, "protocol": en.Protocol,
	}
	if d := en.PinnedDigest(); d != "" {
		out["digest"] = d
	}
	return out
}

// JSON is the description as `plugins info --json` prints it.
func (p *PluginInfo) JSON() map[string]any {
	pi, en, cfg, rep := p.pi, &p.pi.Entry, p.cfg, p.rep
	info := EntryJSON(en)
	info["dir"] = pi.Dir
	info["data_dir"] = pi.DataDir
	// Only what was granted counts; a live manifest that changed is refused at run time.
	info["manifest_changed"] = pi.ManifestChanged
	if pi.Declared != nil {
		info["declared"] = pi.Declared.Names()
	}
	info["sandbox"] = map[string]any{
		"confinement": rep.Confinement, "landlock_abi": rep.LandlockABI, "cgroup": rep.CgroupMode,
		"tree_kill": rep.TreeKill, "strict": cfg.Sandbox.Strict,
	}
	info["plugin_process"] = map[string]any{
		"read_write": p.pa.ReadWrite, "read_only": p.pa.ReadOnly, "read_exec": p.pa.ReadExec,
		"network": cfg.PluginNetwork(en.Granted), "network_to": networkTo(cfg, en.Granted),
		"network_text": cfg.NetworkText(en.Granted), "limits": limitsJSON(cfg.PluginLimits()),
		"unix_sockets": cfg.UnixSocketsAllowed(),
	}
	info["exec"] = map[string]any{
		"allowed": en.Granted.Exec, "read_write": p.xa.ReadWrite, "read_only": p.xa.ReadOnly, "read_exec": p.xa.ReadExec,
		"unprotect": unprotectJSON(cfg),
		"network":   cfg.PluginNetwork(en.Granted), "network_to": networkTo(cfg, en.Granted),
		"limits":       limitsJSON(cfg.ExecLimits()),
		"unix_sockets": cfg.UnixSocketsAllowed(),
	}
	digestJSON(info, pi.Dir, en)
	if p.handshake != nil {
		info["handshake"] = p.handshake
	}
	if p.over != nil {
		info["over_managed_ceiling"] = p.over
	}
	if en.Tools != nil {
		info["tool_rules"] = en.Tools
	}
	if p.pins != nil {
		info["tool_pins"] = p.pins
	}
	if p.wasm != nil {
		info["runtime"], info["plugin_process"] = plugin.RuntimeWasm, p.wasm
	}
	return info
}

// WriteText writes the description for a person.
func (p *PluginInfo) WriteText(w io.Writer) {
	pi, en, cfg, rep := p.pi, &p.pi.Entry, p.cfg, p.rep
	fmt.Fprintf(w, "%s %s\n  source:    %s\n  installed: %s\n  commands:  %s\n  manifest:  sha256:%s\n  granted:   %s\n",
		en.Name, en.Version, en.Source, en.Installed.UTC().Format(time.RFC3339), strings.Join(en.Commands, ", "),
		en.ManifestSHA256, en.Granted.String())
	if pi.ManifestChanged {
		fmt.Fprintln(w, "  manifest:  CHANGED since it was approved: runs are refused until it is reinstalled")
	}
	writeDigestInfo(w, pi.Dir, en)
	for _, v := range p.over {
		fmt.Fprintf(w, "  OVER THE MANAGED CEILING: %s (%s): runs are refused until it is revoked\n", v.Item, v.Rule)
	}
	if d := en.PinnedDigest(); d != "" {
		fmt.Fprintf(w, "  digest:    %s (every start runs this image; plugins update re-resolves)\n", d)
	}
	fmt.Fprintf(w, "  protocol:  %s\n", ProtocolName(en.Protocol))
	if en.Protocol == plugin.ProtocolMCPRemote {
		// No process of it runs: the sandbox lines would describe nothing.
		url := ""
		if pi.Manifest != nil {
			url = policy.StripURLCredentials(pi.Manifest.Remote.URL)
		}
		fmt.Fprintf(w, "  remote:    %s (fledge connects to it itself; no plugin process runs here)\n", url)
		fmt.Fprintf(w, "  network:   %s\n", cfg.NetworkText(en.Granted))
		if pi.Manifest != nil && pi.Manifest.Remote.TokenSecret != "" {
			fmt.Fprintf(w, "  token:     secret %s, sent to that origin only\n", pi.Manifest.Remote.TokenSecret)
		}
		p.writePins(w)
		return
	}
	fmt.Fprintf(w, "  sandbox:   confinement=%s landlock_abi=%d cgroup=%s tree_kill=%s strict=%v\n",
		rep.Confinement, rep.LandlockABI, rep.CgroupMode, rep.TreeKill, cfg.Sandbox.Strict)
	if p.wasm != nil {
		fmt.Fprintf(w, "  runtime:   wasm: %s\n", fledgev1.WasmInfoText(p.wasm))
	} else {
		if pi.Manifest != nil && pi.Manifest.IsImage() {
			fmt.Fprintf(w, "  runtime:   oci: its image is the root of its view (no host system path); runs %s in %s\n",
				strings.Join(pi.Manifest.Image.Argv, " "), pi.Manifest.Image.WorkDir)
		}
		fmt.Fprintf(w, "  plugin process may write: %s\n", strings.Join(p.pa.ReadWrite, ", "))
		fmt.Fprintf(w, "  plugin process may read:  %s\n", strings.Join(p.pa.ReadOnly, ", "))
		fmt.Fprintf(w, "  network (plugin and its commands): %s\n", cfg.NetworkText(en.Granted))
	}
	for _, s := range secretsText(en.Granted) {
		fmt.Fprintf(w, "  secret %s\n", s)
	}
	if en.Granted.Exec {
		fmt.Fprintf(w, "  exec'd commands may write: %s\n", strings.Join(p.xa.ReadWrite, ", "))
		if len(p.xa.Unprotect) > 0 {
			fmt.Fprintf(w, "  ...including (policy unprotect): %s\n", strings.Join(p.xa.Unprotect, ", "))
		}
	} else {
		fmt.Fprintln(w, "  exec: not granted (every exec request is refused with code 126)")
	}
	if p.handshake != nil {
		showHandshakeInfo(w, p.handshake)
	}
	p.writePins(w)
}

// writePins says how a self-describing plugin's tools stand against their pins.
func (p *PluginInfo) writePins(w io.Writer) {
	en := &p.pi.Entry
	switch {
	case p.pins == nil:
	case p.pins.Error != "":
		fmt.Fprintf(w, "  tools:     pins unreadable (%s): every tool held back; 'fledge plugins approve %s'\n", p.pins.Error, en.Name)
	case p.pins.Pinned == 0:
		fmt.Fprintln(w, "  tools:     not pinned yet (the first listing pins them)")
	case p.pins.Pending > 0:
		fmt.Fprintf(w, "  tools:     %d definitions pinned; %d CHANGED and held back: 'fledge plugins review %s'\n", p.pins.Pinned, p.pins.Pending, en.Name)
	case p.pins.Removed > 0:
		fmt.Fprintf(w, "  tools:     %d definitions pinned, none changed; %d no longer listed: 'fledge plugins review %s'\n", p.pins.Pinned, p.pins.Removed, en.Name)
	default:
		fmt.Fprintf(w, "  tools:     %d definitions pinned, none changed\n", p.pins.Pinned)
	}
}
