// SPDX-License-Identifier: MIT

package fledgev1

import (
	"os"
	"sync"

	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/sandbox"
)

// execTmp is the private temp dir the session's execs share: made at the first exec,
// removed when the session ends. One directory per session rather than per exec, because
// a mkdir on a disk-backed /tmp costs about as much as the whole `sh -c true` it serves;
// the execs of one plugin are one trust domain (they could share files through the data
// dir anyway), so nothing is lost.
type execTmp struct {
	once sync.Once
	dir  string
	err  error
}

// get makes the dir on first use, never beneath a directory the execs (writable: their
// read-write roots) could replace with a symlink (safefs.TempParent).
func (t *execTmp) get(writable []string) (string, error) {
	t.once.Do(func() {
		parent, err := safefs.TempParent(writable)
		if err != nil {
			t.err = err
			return
		}
		t.dir, t.err = os.MkdirTemp(parent, "fledge-exec-")
	})
	return t.dir, t.err
}

func (t *execTmp) remove() error {
	if t.dir == "" {
		return nil
	}
	return os.RemoveAll(t.dir)
}

// withSessionTmp points spec at the session temp dir (read-write, TMPDIR); if it cannot be
// made, the sandbox makes a per-run one instead.
func (s *session) withSessionTmp(spec *sandbox.Spec) {
	dir, err := s.tmp.get(spec.Access.ReadWrite)
	if err != nil {
		spec.PrivateTmp = true
		return
	}
	spec.PrivateTmp = false
	spec.Access.ReadWrite = append(append([]string{}, spec.Access.ReadWrite...), dir)
	spec.Env = sandbox.WithEnv(spec.Env, "TMPDIR", dir)
}
