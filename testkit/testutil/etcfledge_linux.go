// SPDX-License-Identifier: MIT

package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// etcFledgeSetup makes a private /etc/fledge, then runs its arguments: /etc becomes an
// overlay over the real one whose upper layer is a tmpfs of the namespace, /etc/fledge is
// made there and the test's dir bind-mounted on it.
const etcFledgeSetup = `set -e
fail() { echo "etc-fledge-setup: $*" >&2; exit 99; }
mount -t tmpfs -o mode=0755 tmpfs "$FLEDGE_TEST_SCRATCH" || fail tmpfs
mkdir "$FLEDGE_TEST_SCRATCH/upper" "$FLEDGE_TEST_SCRATCH/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$FLEDGE_TEST_SCRATCH/upper,workdir=$FLEDGE_TEST_SCRATCH/work" /etc || fail overlay
mkdir -p /etc/fledge
mount --bind "$FLEDGE_TEST_ETC_FLEDGE" /etc/fledge || fail bind
exec "$@"
`

// EtcFledge is how a test runs a program on a machine whose /etc/fledge is dir (the
// managed policy's place), never touching the real /etc: the program is run in a private
// mount namespace (unshare -m) made for it, which ends with it, mounts and all. Prepend
// Prefix to the program's argv and add Env to its environment. It skips (or fails, under
// FLEDGE_REQUIRE_SANDBOX=1) without root or unshare(1).
type EtcFledge struct {
	Prefix []string
	Env    []string
}

// NewEtcFledge makes dir (root's, 0755) the /etc/fledge of the programs run through the
// returned EtcFledge.
func NewEtcFledge(t testing.TB, dir string) EtcFledge {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	SkipUnlessSupported(t, err == nil && os.Geteuid() == 0, "a private /etc/fledge needs root and unshare(1) (util-linux)")
	scratch := filepath.Join(t.TempDir(), "etc-fledge-scratch")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	return EtcFledge{
		Prefix: []string{unshare, "-m", "--propagation", "private", "sh", "-c", etcFledgeSetup, "sh"},
		Env:    []string{"FLEDGE_TEST_SCRATCH=" + scratch, "FLEDGE_TEST_ETC_FLEDGE=" + dir},
	}
}
