// SPDX-License-Identifier: MIT

package linux

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
)

func TestCheckAccess(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a       sandbox.Access
		invalid bool
	}{
		{"disjoint", sandbox.Access{ReadWrite: []string{"/p"}, Deny: []string{"/c"}}, false},
		{"allow is parent", sandbox.Access{ReadOnly: []string{"/h"}, Deny: []string{"/h/c"}}, true},
		{"allow equals", sandbox.Access{ReadExec: []string{"/h/c/"}, Deny: []string{"/h/c"}}, true},
		{"root allowed", sandbox.Access{ReadOnly: []string{"/"}, Deny: []string{"/x"}}, true},
		{"prefix is not parent", sandbox.Access{ReadWrite: []string{"/h/co"}, Deny: []string{"/h/c"}}, false},
		{"dotdot", sandbox.Access{ReadWrite: []string{"/h/x/.."}, Deny: []string{"/h/c"}}, true},
		{"carve-out inside deny", sandbox.Access{ReadOnly: []string{"/h/c/plugins/p"}, Deny: []string{"/h/c"}}, false},
		{"relative", sandbox.Access{ReadOnly: []string{"rel"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkAccess(&tc.a)
			if tc.invalid {
				require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// FuzzCheckAccess: an accepted spec never has an allow entry covering a deny entry.
func FuzzCheckAccess(f *testing.F) {
	f.Add("/home/u", "/home/u/.config/fledge")
	f.Add("/home/u/project", "/home/u/.config/fledge")
	f.Add("/", "/etc")
	f.Add("/a/../b", "/b/c")
	f.Fuzz(func(t *testing.T, allow, deny string) {
		a := sandbox.Access{ReadWrite: []string{allow}, Deny: []string{deny}}
		if checkAccess(&a) != nil {
			return
		}
		al, dl := filepath.Clean(allow), filepath.Clean(deny)
		if within(dl, al) {
			t.Fatalf("accepted allow %q covering deny %q", allow, deny)
		}
	})
}
