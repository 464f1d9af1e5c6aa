// SPDX-License-Identifier: MIT

package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/policy"
)

// A fledge-v1 manifest that does not mention filesystem gets the default level (the project,
// read-only) unless the user says no; one that says "none" gets nothing; a legacy plugin has no
// grants at all.
func TestInstallDefaultFilesystem(t *testing.T) {
	withCaps := func(caps string) func(t *testing.T) string {
		return func(t *testing.T) string {
			dir := copyFixture(t, "envcheck")
			f, err := os.OpenFile(filepath.Join(dir, ManifestFile), os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteString(caps)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			return dir
		}
	}
	cases := []struct {
		name    string
		src     func(t *testing.T) string
		mod     func(*InstallOptions)
		want    policy.Grants
		shown   string
		notShow string
	}{
		{"no capabilities table", func(*testing.T) string { return "testdata/envcheck" }, nil,
			policy.Grants{Filesystem: policy.FilesystemProject}, "reads the project (read-only, default)", ""},
		{"capabilities without filesystem", withCaps("\n[capabilities]\nstore = true\n"), func(o *InstallOptions) { o.Yes = true },
			policy.Grants{Store: true, Filesystem: policy.FilesystemProject}, "reads the project (read-only, default)", ""},
		{"--grant without filesystem keeps the default", withCaps("\n[capabilities]\nstore = true\n"),
			func(o *InstallOptions) { g := policy.Grants{Store: true}; o.Grant = &g },
			policy.Grants{Store: true, Filesystem: policy.FilesystemProject}, "default", ""},
		{"explicit none", withCaps("\n[capabilities]\nfilesystem = \"none\"\n"), nil,
			policy.Grants{Filesystem: policy.FilesystemNone}, "declares no capabilities", "default"},
		{"explicit plugin", withCaps("\n[capabilities]\nfilesystem = \"plugin\"\n"), func(o *InstallOptions) { o.Yes = true },
			policy.Grants{Filesystem: policy.FilesystemPlugin}, "filesystem=plugin", "default"},
		{"legacy plugin", func(*testing.T) string { return "testdata/legacy" }, nil,
			policy.Grants{Filesystem: policy.FilesystemNone}, "declares no capabilities", "default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, out, err := install(t, t.TempDir(), tc.src(t), tc.mod)
			require.NoError(t, err, out)
			assert.Equal(t, tc.want, e.Granted)
			assert.Contains(t, out, tc.shown)
			if tc.notShow != "" {
				assert.NotContains(t, out, tc.notShow)
			}
			assert.NotContains(t, strings.ToLower(out), "installed", "the one installed line is the CLI's")
		})
	}
}

// Install never grants silently: the default filesystem level is asked on a terminal like
// any declared capability (default yes), and named on the Granting line under --yes, --ni
// and --grant, also when the plugin declares nothing else.
func TestInstallDefaultFilesystemIsShownAndAsked(t *testing.T) {
	storeOnly := func(t *testing.T) string {
		dir := copyFixture(t, "envcheck")
		f, err := os.OpenFile(filepath.Join(dir, ManifestFile), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("\n[capabilities]\nstore = true\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		return dir
	}
	for _, tc := range []struct {
		name      string
		src       func(t *testing.T) string
		answers   []bool
		want      policy.Grants
		questions []string
		defaults  []bool
	}{
		{"nothing declared, yes", func(*testing.T) string { return "testdata/envcheck" }, []bool{true},
			policy.Grants{Filesystem: policy.FilesystemProject}, []string{"Grant filesystem=project to envcheck"}, []bool{true}},
		{"nothing declared, no", func(*testing.T) string { return "testdata/envcheck" }, []bool{false},
			policy.Grants{Filesystem: policy.FilesystemNone}, []string{"Grant filesystem=project to envcheck"}, []bool{true}},
		{"store declared, both yes", storeOnly, []bool{true, true},
			policy.Grants{Store: true, Filesystem: policy.FilesystemProject}, []string{"Grant store", "Grant filesystem=project"}, []bool{false, true}},
		{"store declared, filesystem no", storeOnly, []bool{true, false},
			policy.Grants{Store: true, Filesystem: policy.FilesystemNone}, []string{"Grant store", "Grant filesystem=project"}, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asker := &scriptedAsker{answers: tc.answers}
			e, out, err := install(t, t.TempDir(), tc.src(t), func(o *InstallOptions) { o.NonInteractive = false; o.Asker = asker })
			require.NoError(t, err, out)
			assert.Equal(t, tc.want, e.Granted)
			require.Len(t, asker.questions, len(tc.questions), out)
			for i, q := range tc.questions {
				assert.Contains(t, asker.questions[i], q)
			}
			assert.Equal(t, tc.defaults, asker.defaults)
			assert.Contains(t, out, "Granting: "+tc.want.String())
		})
	}
	for _, tc := range []struct {
		name string
		src  func(t *testing.T) string
		mod  func(*InstallOptions)
		line string
	}{
		{"--ni, nothing declared", func(*testing.T) string { return "testdata/envcheck" }, nil,
			"Granting: filesystem=project (filesystem=project by default)"},
		{"--yes, nothing declared", func(*testing.T) string { return "testdata/envcheck" }, func(o *InstallOptions) { o.Yes = true },
			"Granting: filesystem=project (filesystem=project by default)"},
		{"--yes, store declared", storeOnly, func(o *InstallOptions) { o.Yes = true },
			"Granting all declared: store,filesystem=project (filesystem=project by default)"},
		{"--grant store", storeOnly, func(o *InstallOptions) { g := policy.Grants{Store: true}; o.Grant = &g },
			"Granting: store,filesystem=project (filesystem=project by default)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, out, err := install(t, t.TempDir(), tc.src(t), tc.mod)
			require.NoError(t, err, out)
			assert.Contains(t, out, "filesystem=project   "+policy.DescribeDefaultFilesystem, "listed with the capabilities")
			assert.Contains(t, out, tc.line)
		})
	}
}
