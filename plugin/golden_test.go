// SPDX-License-Identifier: MIT

package plugin

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestInstallOutputGolden pins what a user sees at install: warnings, the declared
// capabilities with their descriptions, the hooks (not run), and the summary.
func TestInstallOutputGolden(t *testing.T) {
	cases := []struct {
		golden string
		mod    func(*InstallOptions)
	}{
		{"install_hello_yes.golden", func(o *InstallOptions) { o.Yes = true }},
		{"install_hello_ask.golden", func(o *InstallOptions) {
			o.NonInteractive = false
			o.Asker = &scriptedAsker{answers: []bool{false, true, false}}
		}},
		{"install_legacy.golden", nil},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			src := "testdata/hello"
			if tc.golden == "install_legacy.golden" {
				src = "testdata/legacy"
			}
			_, out, err := install(t, t.TempDir(), src, tc.mod)
			require.NoError(t, err)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -update to create %s", path)
			assert.Equal(t, string(want), out)
		})
	}
}
