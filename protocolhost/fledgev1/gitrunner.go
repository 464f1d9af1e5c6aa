// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fledgehq/fledge/internal/capbuf"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/sandbox"
)

// SandboxedGit runs the host's own git calls (init's git info, metadata answers) under the
// sandbox with access (policy.GitAccess: the project read-only, nothing writable), no
// network, no unix sockets, limits and whole-tree kill. The repository is as untrusted as
// the plugin, and git parsing a hostile repo is attack surface: flags and env alone
// (project.GitWith) stop repo-configured programs, confinement stops the rest.
func SandboxedGit(sb sandbox.Sandbox, access sandbox.Access) project.Runner {
	return func(ctx context.Context, dir string, argv, env []string, maxOut int) ([]byte, error) {
		d, err := os.Open(dir)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		out := capbuf.New(maxOut)
		spec := &sandbox.Spec{
			Kind: sandbox.KindExec, Name: "git", Path: argv[0], Args: argv,
			Dir: d, DirPath: dir, Env: env, Stdout: out,
			Access: access,
			Limits: sandbox.Limits{MemoryBytes: 512 << 20, Pids: 32, Timeout: project.GitTimeout, KillGrace: time.Second},
		}
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left > 0 && left < spec.Limits.Timeout {
				spec.Limits.Timeout = left
			}
		}
		p, err := sb.Start(ctx, spec)
		if err != nil {
			return nil, err
		}
		res, err := p.Wait()
		if err != nil {
			return nil, err
		}
		if out.Truncated() {
			return nil, project.ErrGitOutputTooLarge
		}
		if res.ExitCode != 0 || res.TimedOut {
			return nil, fmt.Errorf("exit status %d (timed out: %v)", res.ExitCode, res.TimedOut)
		}
		return out.Bytes(), nil
	}
}
