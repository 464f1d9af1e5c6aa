// SPDX-License-Identifier: MIT

package project

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// GitTimeout bounds every git call.
const GitTimeout = 5 * time.Second

// maxGitOutput bounds what one git call may return.
const maxGitOutput = 1 << 20

// ErrGitOutputTooLarge: git printed more than maxGitOutput.
var ErrGitOutputTooLarge = errors.New("git output exceeds limit")

// hardening overrides repository config that would make git run repository-chosen programs
// (fsmonitor, hooks, signature verification, external diff, pagers) — a hostile repo must not
// get code execution in the host just because a plugin asked for git_status.
var hardening = []string{
	"-c", "core.fsmonitor=false",
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.pager=cat",
	"-c", "log.showSignature=false",
	"-c", "diff.external=",
	"-c", "core.untrackedCache=false",
	"-c", "protocol.allow=never",
	"--no-pager",
}

// Runner runs argv (argv[0] is "git") in dir with env, returning at most maxOut bytes of
// stdout or ErrGitOutputTooLarge. The host passes a sandboxed runner (read-only project, no
// network); Local runs git directly, for tests and where no sandbox exists.
type Runner func(ctx context.Context, dir string, argv, env []string, maxOut int) ([]byte, error)

// gitEnv is git's whole environment: no global or system config, no prompts, no locks.
var gitEnv = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"GIT_TERMINAL_PROMPT=0",
	"GIT_OPTIONAL_LOCKS=0",
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_CONFIG_GLOBAL=/dev/null",
	"HOME=/nonexistent",
	"LC_ALL=C",
}

// Local runs git as a plain child of the host (hardened by flags and env only).
func Local(ctx context.Context, dir string, argv, env []string, maxOut int) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	out := &limitedBuffer{max: maxOut}
	cmd.Stdout = out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if out.over {
		return nil, ErrGitOutputTooLarge
	}
	return out.Bytes(), err
}

// Git runs git in root with a timeout and bounded output, directly (see Runner).
func Git(ctx context.Context, root string, args ...string) (string, error) {
	return GitWith(ctx, Local, root, args...)
}

// GitWith runs git through run with the hardening flags, a timeout and bounded output.
func GitWith(ctx context.Context, run Runner, root string, args ...string) (string, error) {
	if run == nil {
		run = Local
	}
	ctx, cancel := context.WithTimeout(ctx, GitTimeout)
	defer cancel()
	argv := append(append([]string{"git"}, hardening...), args...)
	out, err := run(ctx, root, argv, gitEnv, maxGitOutput)
	if errors.Is(err, ErrGitOutputTooLarge) {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), ErrGitOutputTooLarge)
	}
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// mayBeInRepo is false only when neither dir nor any directory above it has an entry named
// `.git` (of any type). It looks at names only, never into a repository: whatever it finds
// (or cannot tell) is left to the confined git to read.
func mayBeInRepo(dir string) bool {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return true
	}
	for {
		_, err := os.Lstat(filepath.Join(dir, ".git"))
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return true // there, or unknown (a directory it may not search): git decides
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		dir = parent
	}
}

type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		b.over = true
		return 0, ErrGitOutputTooLarge
	}
	return b.Buffer.Write(p)
}

// GitInfo is the git state sent in init.
type GitInfo struct {
	Branch    string
	Dirty     bool
	Remote    string
	RemoteURL string // raw; callers strip credentials before sending it anywhere
}

// ReadGitInfo returns nil when root is not a git work tree (git run directly).
func ReadGitInfo(ctx context.Context, root string) *GitInfo { return ReadGitInfoWith(ctx, Local, root) }

// ReadGitInfoWith is ReadGitInfo with git run through run. Where neither root nor any
// directory above it has a `.git` entry, git is not run at all: it would answer "not a work
// tree" (git finds a work tree only through a `.git` directory or file at or above it, and
// its environment, gitEnv, names no GIT_DIR), and a confined git costs a whole sandboxed
// launch (a pid-namespace holder, a view, cgroups) on every plugin start outside a repository.
func ReadGitInfoWith(ctx context.Context, run Runner, root string) *GitInfo {
	if !mayBeInRepo(root) {
		return nil
	}
	Git := func(ctx context.Context, root string, args ...string) (string, error) {
		return GitWith(ctx, run, root, args...)
	}
	gi, err := statusInfo(ctx, Git, root)
	if err != nil {
		// status refused: not a work tree, or a repository it cannot read whole (or more
		// changes than the output bound, so dirty); ask the way that tells them apart.
		inside, err2 := Git(ctx, root, "rev-parse", "--is-inside-work-tree")
		if err2 != nil || strings.TrimSpace(inside) != "true" {
			return nil
		}
		gi = &GitInfo{Dirty: errors.Is(err, ErrGitOutputTooLarge)}
		if b, err := Git(ctx, root, "symbolic-ref", "--quiet", "--short", "HEAD"); err == nil {
			gi.Branch = strings.TrimSpace(b)
		} else if b, err := Git(ctx, root, "rev-parse", "--short", "HEAD"); err == nil {
			gi.Branch = strings.TrimSpace(b) // detached HEAD
		}
	}
	if rs, err := Git(ctx, root, "remote"); err == nil {
		remotes := trimLines(rs)
		pick := ""
		for _, r := range remotes {
			if r == "origin" {
				pick = r
			}
		}
		if pick == "" && len(remotes) > 0 {
			pick = remotes[0]
		}
		if pick != "" {
			gi.Remote = pick
			if u, err := Git(ctx, root, "remote", "get-url", pick); err == nil {
				gi.RemoteURL = strings.TrimSpace(u)
			}
		}
	}
	return gi
}

// statusInfo reads the branch and whether the work tree is dirty with one git call (each
// is a confined launch): `status --porcelain=v2 --branch` fails outside a work tree (as
// `rev-parse --is-inside-work-tree` says false there), names the branch as `symbolic-ref
// --short HEAD` does (without the `heads/` that adds where a tag has the same name), and
// lists the same entries as `status --porcelain` (tracked changes and untracked files).
// Ahead/behind counts, which walk history, are not asked for. A detached HEAD costs a
// second call, for its short name.
func statusInfo(ctx context.Context, Git func(context.Context, string, ...string) (string, error), root string) (*GitInfo, error) {
	out, err := Git(ctx, root, "status", "--porcelain=v2", "--branch", "--no-ahead-behind")
	if err != nil {
		return nil, err
	}
	gi := &GitInfo{}
	head, detached := "", false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "# branch.head "):
			head = strings.TrimPrefix(line, "# branch.head ")
			detached = head == "(detached)"
		case strings.HasPrefix(line, "#"):
		default:
			gi.Dirty = true
		}
	}
	gi.Branch = head
	if detached {
		gi.Branch = ""
		if b, err := Git(ctx, root, "rev-parse", "--short", "HEAD"); err == nil {
			gi.Branch = strings.TrimSpace(b)
		}
	}
	return gi, nil
}
