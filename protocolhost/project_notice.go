// SPDX-License-Identifier: MIT

package protocolhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/ui"
)

// farProject is how many directories above the working directory a detected project's
// root may be before a run names it: the working directory itself or its parent is the
// project the user sees; further up, a marker they may not know of (a stray .git in a
// parent) would decide what the plugin reads and writes.
const farProject = 1

// projectNotice is the one line a run says about its project, or "": that there is none
// and how to make one, or which one it is when it was found more than farProject
// directories above cwd. A project --project named is never announced: the user chose it.
func projectNotice(cwd string, proj *project.Info, flag string) string {
	if flag != "" || cwd == "" {
		return ""
	}
	cwd = core.Resolved(cwd)
	if proj == nil {
		return fmt.Sprintf("no project here (no fledge.toml or .git in %s or above): the plugin gets none; make one with 'git init' or 'touch fledge.toml'", cwd)
	}
	rel, err := filepath.Rel(proj.Root, cwd)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	up := 0
	if rel != "." {
		up = len(strings.Split(rel, string(filepath.Separator)))
	}
	if up <= farProject {
		return ""
	}
	return fmt.Sprintf("project %s (its %s is %d directories above %s)", proj.Root, proj.Marker, up, cwd)
}

// noteProject says projectNotice's line on stderr, if any.
func (h *Host) noteProject(proj *project.Info) {
	cwd, _ := os.Getwd()
	if msg := projectNotice(cwd, proj, h.opts.ProjectFlag); msg != "" {
		_ = ui.HostLine(h.stderr(), "fledge: "+msg)
	}
}
