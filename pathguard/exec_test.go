// SPDX-License-Identifier: MIT

//go:build unix

package pathguard

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const childEnv = "FLEDGE_PATHGUARD_TEST_CHILD"

// TestMain doubles as the child of TestHandleTravelsToChild: it does what the sandbox stub
// does (fchdir into fd 3, Verify it), then prints where it is.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	dev, _ := strconv.ParseUint(os.Getenv("WANT_DEV"), 10, 64)
	ino, _ := strconv.ParseUint(os.Getenv("WANT_INO"), 10, 64)
	f := os.NewFile(3, "cwd")
	if err := unix.Fchdir(3); err != nil {
		fmt.Fprintln(os.Stderr, "fchdir:", err)
		return 3
	}
	if err := Verify(f, dev, ino); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	fmt.Print(wd)
	return 0
}

func TestHandleTravelsToChild(t *testing.T) {
	for _, mode := range testModes {
		t.Run(mode, func(t *testing.T) {
			tr := buildTree(t)
			g := newGuard(t, mode, tr.root)
			d, err := g.Resolve("link_in/b")
			require.NoError(t, err)
			defer d.Close()
			other, err := g.Resolve("deep")
			require.NoError(t, err)
			defer other.Close()

			run := func(dev, ino uint64) (string, string, error) {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), childEnv+"=1",
					"WANT_DEV="+strconv.FormatUint(dev, 10), "WANT_INO="+strconv.FormatUint(ino, 10))
				cmd.ExtraFiles = []*os.File{d.File}
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				err := cmd.Run()
				return out.String(), errb.String(), err
			}
			out, stderr, err := run(d.Dev, d.Ino)
			require.NoError(t, err, stderr)
			assert.Equal(t, tr.root+"/a/b", out)

			// The child refuses a handle that is not the directory that was checked.
			_, stderr, err = run(other.Dev, other.Ino)
			require.Error(t, err)
			assert.Contains(t, stderr, "directory changed")
		})
	}
}
