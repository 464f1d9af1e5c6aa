// SPDX-License-Identifier: MIT

package protocolhost

import (
	"fmt"
	"io"

	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
)

// sourceKind is an install source as the managed policy's [sources] allow names it: its
// kind (dir, git, npm, pypi, oci) and the package, image or URL (a package's version left
// out).
func sourceKind(source string) (kind, name string) {
	if plugin.IsPackageSource(source) {
		if k, pkg, _, err := plugin.ParsePackageSource(source); err == nil {
			return k, pkg
		}
		k, rest, _ := strings.Cut(source, ":")
		return k, rest
	}
	if plugin.IsGitURL(source) {
		return policy.SourceGit, policy.StripURLCredentials(source)
	}
	return policy.SourceDir, source
}

// checkSource refuses, on record, a source the managed policy does not allow, before
// anything is fetched or run.
func (in *installer) checkSource(source string) error {
	kind, name := sourceKind(source)
	err := in.h.Env.Config.Managed.AllowSource(kind, name)
	if err == nil {
		return nil
	}
	_ = in.h.Env.NewRecorder(in.log, refusedRef(source), nil).RecordNow(audit.EventInstall, audit.Deny, reason.CapabilityNotAllowed,
		map[string]any{"source": policy.StripURLCredentials(source), "error": err.Error()})
	return exitErr(ExitCannotRun, "%s: %v", in.what(policy.StripURLCredentials(source)), err)
}

// managedJSON is the managed policy as doctor --json shows it (nil: none).
func managedJSON(m *policy.Managed) any {
	if !m.Active() {
		return nil
	}
	return map[string]any{"files": m.Files, "digest": m.Digest, "require_export": m.RequireExport}
}

// writeManaged is doctor's lines about the managed policy.
func writeManaged(w io.Writer, m *policy.Managed) {
	if !m.Active() {
		fmt.Fprintf(w, "  managed policy:   none (%s)\n", policy.ManagedDir())
		return
	}
	fmt.Fprintf(w, "  managed policy:   sha256 %s\n", m.Digest)
	for _, f := range m.Files {
		fmt.Fprintf(w, "                    %s (sha256 %s)\n", f.Path, f.SHA256)
	}
}
