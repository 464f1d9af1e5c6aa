// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// isImageSource: oci:REF or oci-archive:PATH.
func isImageSource(src string) bool {
	return strings.HasPrefix(src, plugin.SourceOCI) || strings.HasPrefix(src, plugin.SourceOCIArchive)
}

// runImage installs (or, with keep, updates) a plugin from a container image: the
// reference is resolved and pinned to a digest, the manifest and config checked, the
// grants decided, the layers fetched, checked and unpacked into the staged plugin dir
// (rootfs/), and the server started confined with the image as the root of its view to
// list its tools. No image code runs before that start. approved is how the user asked for
// it before (its entry's record; nil on an install).
func (in *installer) runImage(ctx context.Context, o *InstallRequest, base plugin.InstallOptions, keep *plugin.Entry, approved *plugin.OCIRecord) error {
	e := in.h.Env
	kind, ref, version, err := plugin.ParsePackageSource(o.Source)
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	p := o.Package
	if version != "" || p.Version != "" || p.Bin != "" {
		return exitErr(ExitUsage, "install %s: an image's tag or digest is part of its reference (oci:REGISTRY/REPO:TAG or @sha256:...); --version and --bin are npm's", o.Source)
	}
	req := plugin.OCIRequest{Ref: ref, Archive: kind == "oci-archive", Args: p.ServerArgs, Env: p.Env, Name: p.Name,
		Filesystem: p.Filesystem, Network: p.Network, Secrets: p.Secrets}
	if req.Archive && !filepath.IsAbs(req.Ref) {
		if abs, err := filepath.Abs(req.Ref); err == nil {
			req.Ref = abs
		}
	}
	refuse := func(code int, rc reason.Code, err error) error {
		var ref *audit.PluginRef
		if keep != nil {
			ref = entryRef(keep)
		}
		_ = e.NewRecorder(in.log, ref, nil).RecordNow(audit.EventInstall, audit.Deny, rc,
			map[string]any{"source": req.Source(), "error": err.Error()})
		return exitErr(code, "%s: %v", in.what(req.Source()), err)
	}
	if err := req.Check(); err != nil {
		return refuse(ExitUsage, reason.LaunchFailed, err)
	}
	if runtime.GOOS != "linux" {
		// Unpacked with openat2 and run with the image as the root of a private view.
		return refuse(ExitCannotRun, reason.LaunchFailed, fmt.Errorf("%w: an image plugin runs on Linux only (it needs the private filesystem view)", plugin.ErrSourceUnsupported))
	}
	if keep == nil {
		if err := plugin.DecideBeforeOCIFetch(base, req); err != nil {
			return refuse(installExit(err), reason.Code(installReason(err)), err)
		}
	}
	tmp, err := fetchDir(e.ConfigDir, ".fetch-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	fmt.Fprintf(in.errOut, "Resolving image %s (no image code runs in this step)...\n", req.Ref)
	pk, err := plugin.FetchOCI(ctx, plugin.OCIOptions{Request: req, Dir: tmp, Digest: p.Digest})
	if err != nil {
		code := ExitFailure
		switch {
		case errors.Is(err, plugin.ErrBadSource):
			code = ExitUsage
		case errors.Is(err, plugin.ErrSourceUnsupported):
			code = ExitCannotRun
		}
		return refuse(code, reason.LaunchFailed, err)
	}
	defer pk.Close()
	fmt.Fprintf(in.errOut, "Pinned %s to %s (%d layers, %s); every blob is checked against its digest.\n",
		req.Ref, pk.Digest, pk.Layers, humanSize(pk.Size))
	if keep != nil {
		if err := in.approveImage(keep.Name, approved, pk, base); err != nil {
			rc := reason.NonInteractive
			if errors.Is(err, errDeclined) {
				rc = reason.Cancelled
			}
			return refuse(ExitCannotRun, rc, err)
		}
		base.KeepGrants = &keep.Granted
		base.PreviousAsked = plugin.ApprovedAsked(e.ConfigDir, keep)
	}
	base.Source = tmp
	base.RecordSource = req.Source()
	base.Handshake = nil
	base.RunHooks = false
	base.OCI = &plugin.OCIRecord{OCIRequest: pk.Request, Digest: pk.Digest}
	base.Unpack = in.unpackImage(pk)
	var listed []tools.Tool
	base.Verify = in.verifyServer(keep != nil, p.Force, &listed)
	if err := in.installOne(ctx, base); err != nil {
		return err
	}
	fmt.Fprintf(in.errOut, "Installed image %s@%s in %s.\n", req.Ref, pk.Digest, time.Since(start).Round(time.Millisecond))
	if listed != nil {
		in.showTools(pk.Name, listed)
	}
	return nil
}

// unpackImage is the install's Unpack step: the layers into the staged copy's image root,
// once the grants were decided, and the user told of the setuid/setgid bits dropped.
func (in *installer) unpackImage(pk *plugin.OCIPackage) func(ctx context.Context, stage string) error {
	return func(ctx context.Context, stage string) error {
		fmt.Fprintf(in.errOut, "Unpacking %d layers (whiteouts applied; no device, setuid bit, or path out of the image)...\n", pk.Layers)
		if err := pk.Unpack(ctx, filepath.Join(stage, plugin.ImageRootDir)); err != nil {
			return err
		}
		if pk.SetIDDropped > 0 {
			_ = ui.HostLine(in.errOut, fmt.Sprintf("fledge: %d setuid/setgid bits of the image were dropped (its files run with the rights of whoever runs fledge)", pk.SetIDDropped))
		}
		return nil
	}
}

// approveImage has the user approve an update of an image plugin that would run another
// image (the tag now names another digest) or run it differently. On a terminal it asks;
// with --yes a new digest of the same request is taken (the user asked for the update),
// but nothing else; without either it is refused.
func (in *installer) approveImage(name string, approved *plugin.OCIRecord, pk *plugin.OCIPackage, base plugin.InstallOptions) error {
	var prev *plugin.OCIRequest
	was := ""
	if approved != nil {
		prev, was = &approved.OCIRequest, approved.Digest
	}
	changes := pk.Request.Changes(prev)
	newDigest := was != pk.Digest
	if len(changes) == 0 && !newDigest {
		return nil
	}
	if newDigest {
		changes = append(changes, fmt.Sprintf("digest: %s (was %s)", pk.Digest, orNone(was)))
	}
	_ = ui.HostLine(in.errOut, fmt.Sprintf("Updating %s would run another image, or run it differently:", name))
	for _, c := range changes {
		_ = ui.HostLine(in.errOut, "  "+c)
	}
	onlyDigest := len(changes) == 1 && newDigest && approved != nil
	if base.Asker == nil || base.NonInteractive || base.Yes {
		if base.Yes && onlyDigest {
			return nil
		}
		return fmt.Errorf("%w: %s; run `fledge plugins update %s` on a terminal to review it (--yes takes a new digest of the same image, nothing else)",
			plugin.ErrUnapprovedChange, strings.Join(changes, "; "), name)
	}
	ok, err := base.Asker.Confirm(fmt.Sprintf("Update %s with these?", name), false)
	if err != nil {
		return fmt.Errorf("update cancelled: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: %s stays as it was, pinned to %s", errDeclined, name, orNone(was))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// updateImage fetches an image plugin again the way it was asked for (its entry's record).
func (h *Host) updateImage(ctx context.Context, in *installer, base plugin.InstallOptions, old *plugin.Entry, o UpdateRequest) error {
	rec := old.OCI
	if rec == nil {
		return exitErr(ExitCannotRun, "update %s: how it was installed is not recorded; install it again", o.Name)
	}
	if rec.Source() != old.Source {
		return exitErr(ExitCannotRun, "update %s: plugins.toml records image %s for source %s; install it again", o.Name, rec.Source(), old.Source)
	}
	r := rec.OCIRequest
	ir := &InstallRequest{Source: old.Source, Yes: o.Yes, Package: PackageRequest{Name: o.Name,
		Env: r.Env, Network: r.Network, Filesystem: r.Filesystem, ServerArgs: r.Args, Secrets: r.Secrets, Force: o.Force}}
	return in.runImage(ctx, ir, base, old, rec)
}
