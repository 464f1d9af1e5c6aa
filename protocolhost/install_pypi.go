// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// runPyPI installs a plugin from pypi:PACKAGE: the user's pip (or uv) fetches wheels only
// (no package code runs), every wheel's sha256 goes into the entry's lock, the wheels are
// unpacked into the plugin dir, and the written plugin (protocol = "mcp") is installed like
// any dir, its content digest recorded; then its tools are listed (the server starts
// confined). With --allow-sdist a package without a wheel is built by a confined install
// hook. keep is the entry being updated, if any.
func (in *installer) runPyPI(ctx context.Context, o *InstallRequest, base plugin.InstallOptions, keep *plugin.Entry, pkg, version string) error {
	e := in.h.Env
	p := o.Package
	src := plugin.SourcePyPI + pkg
	if version != "" && p.Version != "" {
		return exitErr(ExitUsage, "install %s: give the version once (pypi:PKG==VERSION or --version)", o.Source)
	}
	if p.Version != "" {
		version = p.Version
	}
	deny := func(code int, err error) error {
		ref := (*audit.PluginRef)(nil)
		if keep != nil {
			ref = entryRef(keep)
		}
		_ = e.NewRecorder(in.log, ref, nil).RecordNow(audit.EventInstall, audit.Deny, reason.Code(installReason(err)),
			map[string]any{"source": src, "error": err.Error()})
		return exitErr(code, "%s: %v", in.what(src), err)
	}
	req := plugin.PyPIRequest{Package: pkg, Version: version, Args: p.ServerArgs, Env: p.Env, Name: p.Name, Bin: p.Bin,
		Filesystem: p.Filesystem, Network: p.Network, Secrets: p.Secrets, Python: p.Python, AllowSdist: p.AllowSdist}
	if err := req.Check(); err != nil {
		return deny(ExitUsage, err)
	}
	if keep == nil && in.sync == nil {
		if err := plugin.DecideBeforeFetchPyPI(base, req); err != nil {
			return deny(installExit(err), err)
		}
	}
	pluginsDir := filepath.Join(e.ConfigDir, "plugins")
	if err := os.MkdirAll(pluginsDir, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(pluginsDir, ".fetch-pypi-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	pk, err := in.fetchPyPI(ctx, req, tmp, pkg)
	if err != nil {
		return deny(pypiFetchExit(err), err)
	}
	in.announcePyPI(pkg, pk, &base)
	base.Source = tmp
	base.RecordSource = src
	base.Handshake = nil
	base.RecordDigest = true
	if keep != nil {
		if err := in.approvePyPIUpdate(keep, src, pk, &base); err != nil {
			return err
		}
	}
	rec := pk.Request
	base.PyPI = &rec
	var listed []tools.Tool
	base.Verify = in.verifyServer(keep != nil, p.Force, &listed)
	if in.sync != nil {
		base.Verify = in.syncVerify(&listed)
	}
	if err := in.installOne(ctx, base); err != nil {
		return err
	}
	if listed != nil {
		in.showTools(pk.Name, listed)
	}
	return nil
}

// fetchPyPI has the user's pip or uv fetch the package's wheels into tmp; on a sync, exactly
// the wheels fledge.lock pins.
func (in *installer) fetchPyPI(ctx context.Context, req plugin.PyPIRequest, tmp, pkg string) (*plugin.PyPIPackage, error) {
	fo := plugin.PyPIOptions{Request: req, Dir: tmp}
	if in.sync != nil {
		// Exactly the wheels fledge.lock pins, or nothing.
		fo.Pinned = []plugin.Wheel{}
		if in.sync.PyPI != nil {
			fo.Pinned = append(fo.Pinned, in.sync.PyPI.Wheels...)
		}
	}
	fmt.Fprintf(in.errOut, "Fetching PyPI package %s with your pip or uv (wheels only: no package code runs in this step)...\n", pkg)
	return plugin.FetchPyPI(ctx, fo)
}

// pypiFetchExit is the exit status of a failed fetch: no usable pip or Python is the
// machine's, a bad source the user's, anything else a plain failure.
func pypiFetchExit(err error) int {
	code := ExitFailure
	switch {
	case errors.Is(err, plugin.ErrNoPip), errors.Is(err, plugin.ErrPythonInHome):
		code = ExitCannotRun
	case errors.Is(err, plugin.ErrBadSource):
		code = ExitUsage
	}
	return code
}

// announcePyPI says what was fetched: the pinned wheels, or, for a package built from its
// sdist, that its build runs as a confined install hook (which it turns on in base).
func (in *installer) announcePyPI(pkg string, pk *plugin.PyPIPackage, base *plugin.InstallOptions) {
	if pk.Build {
		reach := "no network"
		if pk.Index != "" {
			reach = "network only to the index, " + pk.Index
		}
		fmt.Fprintf(in.errOut, "%s has no wheel for this platform; --allow-sdist: its build backend runs as an install hook, confined (the staged plugin dir its only writable place, no project, no home, %s).\n", pkg, reach)
		base.RunHooks = true
		base.HooksOffline = true
		if pk.Index != "" {
			base.HooksNetworkTo = []string{pk.Index}
		}
		return
	}
	fmt.Fprintf(in.errOut, "Fetched %s %s with %s (console script %s); %d wheels pinned by sha256:\n", pkg, pk.Version, pk.Tool, pk.Script, len(pk.Request.Wheels))
	for _, w := range pk.Request.Wheels {
		_ = ui.HostLine(in.errOut, fmt.Sprintf("  %s %s  sha256:%s", w.Name, w.Version, w.SHA256))
	}
}

// approvePyPIUpdate asks the user to approve what an update of keep changes (recording a
// refusal) and carries keep's grants and answers over into base.
func (in *installer) approvePyPIUpdate(keep *plugin.Entry, src string, pk *plugin.PyPIPackage, base *plugin.InstallOptions) error {
	e := in.h.Env
	if err := in.approveChanges(keep.Name, keep.PyPI == nil, pk.Request.Changes(keep.PyPI), *base); err != nil {
		rc := reason.NonInteractive
		if errors.Is(err, errDeclined) {
			rc = reason.Cancelled
		}
		_ = e.NewRecorder(in.log, entryRef(keep), nil).RecordNow(audit.EventInstall, audit.Deny, rc,
			map[string]any{"source": src, "error": err.Error()})
		return exitErr(ExitCannotRun, "update %s: %v", keep.Name, err)
	}
	base.KeepGrants = &keep.Granted
	base.PreviousAsked = plugin.ApprovedAsked(e.ConfigDir, keep)
	return nil
}

// pypiRecord is how the PyPI plugin of en was asked for (its entry's record).
func pypiRecord(en *plugin.Entry) (*plugin.PyPIRequest, error) {
	_, pkg, _, err := plugin.ParsePackageSource(en.Source)
	if err != nil {
		return nil, err
	}
	if en.PyPI == nil {
		return nil, fmt.Errorf("plugins.toml has no record of how it was asked for")
	}
	r := *en.PyPI
	if r.Package != pkg {
		return nil, fmt.Errorf("plugins.toml records package %q for source %s", r.Package, en.Source)
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("how it was installed (plugins.toml): %w", err)
	}
	return &r, nil
}

// writeDigestInfo is info's lines on a plugin pinned by content: its digest, whether its
// files still match it, and a PyPI plugin's wheels.
func writeDigestInfo(w io.Writer, dir string, en *plugin.Entry) {
	if en.Digest == "" {
		return
	}
	state := "matches"
	if err := plugin.VerifyDigest(dir, en.Digest); err != nil {
		state = "CHANGED since install: runs are refused until it is reinstalled"
	}
	fmt.Fprintf(w, "  digest:    %s (%s)\n", en.Digest, state)
	if en.PyPI != nil {
		py := en.PyPI.Python
		if py == "" {
			py = plugin.DefaultPython
		}
		fmt.Fprintf(w, "  python:    %s\n  wheels:    %d pinned\n", py, len(en.PyPI.Wheels))
		for _, wh := range en.PyPI.Wheels {
			sum := "built from sdist (unpinned)"
			if wh.SHA256 != "" {
				sum = "sha256:" + wh.SHA256
			}
			fmt.Fprintf(w, "    %s %s  %s\n", wh.Name, wh.Version, sum)
		}
	}
}

// digestJSON adds the same to info --json.
func digestJSON(info map[string]any, dir string, en *plugin.Entry) {
	if en.Digest == "" {
		return
	}
	info["digest"] = en.Digest
	info["digest_matches"] = plugin.VerifyDigest(dir, en.Digest) == nil
	if en.PyPI != nil {
		info["wheels"] = en.PyPI.Wheels
		info["python"] = en.PyPI.Python
	}
}
