// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/jsonrpc"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// maxExecutableBytes bounds a bare executable fledge copies in.
const maxExecutableBytes = 256 << 20

// selfDescribing are the protocols whose bare executables describe themselves in a
// handshake, so fledge can write the manifest it keeps.
var selfDescribing = map[string]bool{plugin.ProtocolJSONRPC: true}

// runSelfDescribing installs a bare executable or every executable of a dir.
func (in *installer) runSelfDescribing(ctx context.Context, o *InstallRequest, base plugin.InstallOptions) error {
	if !selfDescribing[o.Protocol] {
		return exitErr(ExitUsage, "--protocol %q: installing bare executables is supported for: %s", o.Protocol, plugin.ProtocolJSONRPC)
	}
	if o.FromDir == "" {
		st, err := os.Stat(o.Source)
		if err == nil && st.IsDir() {
			// A plugin dir with its own plugin.toml: the ordinary install, handshake included.
			if m, _, err := plugin.LoadManifest(o.Source); err == nil && m.Plugin.Protocol != o.Protocol {
				return exitErr(ExitUsage, "%s declares protocol %q, not %q", o.Source, m.Plugin.Protocol, o.Protocol)
			}
			base.Handshake = in.handshakeHook(nil)
			return in.installOne(ctx, base)
		}
		return in.installExecutable(ctx, o, base, o.Source)
	}
	ents, err := os.ReadDir(o.FromDir)
	if err != nil {
		return exitErr(ExitFailure, "--from-dir: %v", err)
	}
	var names []string
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), ".") {
			continue // a JSON-RPC 2.0 host skips hidden files
		}
		st, err := os.Stat(filepath.Join(o.FromDir, en.Name()))
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue // only executable files are plugins
		}
		names = append(names, en.Name())
	}
	sort.Strings(names)
	if len(names) == 0 {
		fmt.Fprintf(in.errOut, "no executables in %s\n", o.FromDir)
		return nil
	}
	failed := 0
	for _, n := range names {
		if err := in.installExecutable(ctx, o, base, filepath.Join(o.FromDir, n)); err != nil {
			failed++
			var ee *ExitError
			if errors.As(err, &ee) && ee.Msg != "" {
				_ = ui.HostLine(in.errOut, "fledge: "+ee.Msg)
			}
		}
	}
	fmt.Fprintf(in.out, "installed %d of %d plugins from %s\n", len(names)-failed, len(names), o.FromDir)
	if failed > 0 {
		return &ExitError{Code: ExitFailure}
	}
	return nil
}

// installExecutable wraps a bare executable in a dir of its own, learns what it is from its
// handshake (confined, nothing granted), writes the manifest fledge keeps, and installs it.
// The handshake runs once: its answer is what install records.
func (in *installer) installExecutable(ctx context.Context, o *InstallRequest, base plugin.InstallOptions, path string) error {
	e, log := in.h.Env, in.log
	abs, err := filepath.Abs(path)
	if err != nil {
		return exitErr(ExitFailure, "install %s: %v", path, err)
	}
	tmp, err := os.MkdirTemp("", "fledge-exe-")
	if err != nil {
		return exitErr(ExitFailure, "install %s: %v", path, err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Base(abs)
	if !filepath.IsLocal(bin) || strings.HasPrefix(bin, ".") || strings.ContainsAny(bin, "\x00\n\r\t") {
		bin = "plugin"
	}
	if err := copyExecutable(abs, filepath.Join(tmp, bin)); err != nil {
		return exitErr(ExitFailure, "install %s: %v", abs, err)
	}
	refName := strings.ToLower(bin)
	if !plugin.ValidName(refName) {
		refName = "unnamed"
	}
	man, err := jsonrpc.Probe(ctx, jsonrpc.ProbeOptions{
		Env: e, Dir: tmp, Binary: bin, Stderr: in.errOut, Warn: warnFunc(in.errOut),
		Ref: &audit.PluginRef{Name: refName, Source: abs},
	})
	if err == nil {
		err = checkPluginLimit(e.ConfigDir, man.Name)
	}
	if err != nil {
		_ = e.NewRecorder(log, &audit.PluginRef{Name: refName, Source: abs}, nil).RecordNow(audit.EventInstall, audit.Deny,
			reason.Code(installReason(err)), map[string]any{"source": abs, "error": err.Error()})
		return exitErr(ExitFailure, "install %s: %v", abs, err)
	}
	// A JSON-RPC 2.0 tool/hook plugin runs with full access in its own host; here it declares the two sandbox
	// capabilities it could use, and the user grants them (or not) as for any plugin.
	if _, err := plugin.WriteExecutableManifest(tmp, plugin.ExecutableMeta{
		Name: man.Name, Version: man.Version, Description: man.Description, Protocol: o.Protocol,
		Binary: bin, Filesystem: policy.FilesystemProject, Network: true,
	}); err != nil {
		return exitErr(ExitFailure, "install %s: %v", abs, err)
	}
	one := base
	one.Source, one.RecordSource = tmp, abs
	one.Handshake = in.handshakeHook(map[string]*jsonrpc.Manifest{tmp: man})
	return in.installOne(ctx, one)
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", plugin.ErrBadSource, src)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%w: %s is not executable", plugin.ErrBadSource, src)
	case st.Size() > maxExecutableBytes:
		return fmt.Errorf("%w: %s is larger than %d bytes", plugin.ErrBadSource, src, maxExecutableBytes)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.LimitReader(in, maxExecutableBytes)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// checkPluginLimit refuses a jsonrpc-2.0 plugin past the protocol's limit of 16.
func checkPluginLimit(configDir, name string) error {
	reg, err := plugin.LoadRegistry(configDir)
	if err != nil {
		return err
	}
	n := 0
	for _, en := range reg.Plugins {
		if en.Protocol == plugin.ProtocolJSONRPC && en.Name != name {
			n++
		}
	}
	if n >= jsonrpc.MaxPlugins {
		return fmt.Errorf("%w: %d jsonrpc-2.0 plugins are installed, the protocol's limit is %d: %s not installed (remove one first)",
			jsonrpc.ErrLimit, n, jsonrpc.MaxPlugins, name)
	}
	return nil
}

// handshakeHook is install's handshake step for jsonrpc-2.0 plugins: it runs the handshake
// confined with nothing granted (unless it already ran: probed), checks the manifest agrees
// with plugin.toml, shows what the plugin is, and returns the handshake install records.
func (in *installer) handshakeHook(probed map[string]*jsonrpc.Manifest) func(context.Context, string, *plugin.Manifest) ([]byte, error) {
	e, out := in.h.Env, in.errOut
	return func(ctx context.Context, dir string, m *plugin.Manifest) ([]byte, error) {
		if m.Plugin.Protocol != plugin.ProtocolJSONRPC {
			return nil, nil
		}
		if len(m.Commands) != 1 {
			return nil, fmt.Errorf("%w: a jsonrpc-2.0 plugin has exactly one [[commands]] entry (its executable), this one has %d", plugin.ErrInvalidManifest, len(m.Commands))
		}
		live := probed[dir]
		if live == nil {
			var err error
			live, err = jsonrpc.Probe(ctx, jsonrpc.ProbeOptions{
				Env: e, Dir: dir, Binary: m.Commands[0].Binary, Stderr: out, Warn: warnFunc(out),
				Ref: &audit.PluginRef{Name: m.Plugin.Name, Version: m.Plugin.Version, Source: dir, ManifestDigest: m.SHA256()},
			})
			if err != nil {
				return nil, err
			}
		}
		if live.Name != m.Plugin.Name {
			return nil, fmt.Errorf("%w: plugin.toml names the plugin %q but its handshake says %q", jsonrpc.ErrHandshake, m.Plugin.Name, live.Name)
		}
		if err := checkPluginLimit(e.ConfigDir, live.Name); err != nil {
			return nil, err
		}
		showManifest(out, live)
		return live.Encode(), nil
	}
}

// showManifest tells the user what the plugin said it is before anything is granted.
func showManifest(w io.Writer, m *jsonrpc.Manifest) {
	fmt.Fprintf(w, "Plugin %s %s (jsonrpc-2.0): %s\n", m.Name, m.Version, m.Description)
	fmt.Fprintf(w, "  priority: %d\n", m.Priority)
	if len(m.Hooks) == 0 {
		fmt.Fprintln(w, "  hooks:    none")
	} else {
		fmt.Fprintf(w, "  hooks:    %s\n", strings.Join(m.Hooks, ", "))
	}
	if len(m.Tools) == 0 {
		fmt.Fprintln(w, "  tools:    none")
	}
	for _, t := range m.Tools {
		fmt.Fprintf(w, "  tool:     %s  %s%s\n", tools.PublicName(m.Name, t.Name), t.Description, tools.ParamsText(t.Parameters))
	}
}

// recordedHandshake is what a jsonrpc-2.0 plugin said at install (nil for other plugins),
// for `plugins info`.
func recordedHandshake(en *plugin.Entry, dir string) *jsonrpc.Manifest {
	if en.Protocol != plugin.ProtocolJSONRPC {
		return nil
	}
	m, err := jsonrpc.Recorded(&core.Binding{Entry: en, Dir: dir})
	if err != nil {
		return nil
	}
	return m
}

func showHandshakeInfo(w io.Writer, m *jsonrpc.Manifest) {
	fmt.Fprintf(w, "  jsonrpc-2.0 handshake (recorded at install):\n")
	fmt.Fprintf(w, "    priority: %d\n", m.Priority)
	hooks := "none"
	if len(m.Hooks) > 0 {
		hooks = strings.Join(m.Hooks, ", ")
	}
	fmt.Fprintf(w, "    hooks:    %s\n", hooks)
	for _, t := range m.Tools {
		fmt.Fprintf(w, "    tool:     %s  %s%s\n", tools.PublicName(m.Name, t.Name), t.Description, tools.ParamsText(t.Parameters))
	}
}
