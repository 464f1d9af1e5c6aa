// SPDX-License-Identifier: MIT

package project

import (
	"context"
	"strings"
)

// GitLogLimit is how many commits git_log returns.
const GitLogLimit = 20

// Metadata answers one project metadata key (fledge_config, git_tags, git_status, git_log).
// known is false for keys this package does not serve (the caller answers env and unknown
// keys). A key that cannot be read here (no project, not a git repo, git failed) is nil.
func Metadata(ctx context.Context, p *Info, key string) (value any, known bool) {
	return MetadataWith(ctx, Local, p, key)
}

// MetadataWith is Metadata with git run through run.
func MetadataWith(ctx context.Context, run Runner, p *Info, key string) (value any, known bool) {
	Git := func(ctx context.Context, root string, args ...string) (string, error) {
		return GitWith(ctx, run, root, args...)
	}
	switch key {
	case "fledge_config", "git_tags", "git_status", "git_log":
	default:
		return nil, false
	}
	if p == nil {
		return nil, true
	}
	switch key {
	case "fledge_config":
		cfg, err := ReadFledgeConfig(p.Root)
		if err != nil || cfg == nil {
			return nil, true
		}
		return cfg, true
	case "git_tags":
		out, err := Git(ctx, p.Root, "tag", "--list")
		if err != nil {
			return nil, true
		}
		return trimLines(out), true
	case "git_status":
		out, err := Git(ctx, p.Root, "status", "--porcelain")
		if err != nil {
			return nil, true
		}
		files := []string{}
		for _, l := range trimLines(out) {
			if len(l) > 3 {
				files = append(files, strings.TrimSpace(l[3:]))
			}
		}
		return files, true
	case "git_log":
		out, err := Git(ctx, p.Root, "log", "--no-color", "--format=%h %s", "-n", "20")
		if err != nil {
			return nil, true
		}
		return trimLines(out), true
	}
	return nil, true
}
