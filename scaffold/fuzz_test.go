// SPDX-License-Identifier: MIT

package scaffold

import (
	"testing"

	"github.com/fledgehq/fledge/plugin"
)

// FuzzRender: any name either renders a plugin whose manifest fledge accepts, naming that
// exact command, or is refused with ErrInvalidName; never a panic, never a half answer.
func FuzzRender(f *testing.F) {
	for _, s := range []string{"hello", "a", "run", "x-y_z9", "", "A", "../x", "a\nb", "a\"b", "{{.Name}}", "0"} {
		f.Add(s, "bash")
	}
	f.Add("p", "go")
	f.Add("p", "python")
	f.Fuzz(func(t *testing.T, name, lang string) {
		files, err := Render(Options{Name: name, Lang: lang})
		if err != nil {
			if files != nil {
				t.Fatalf("error %v with files", err)
			}
			return
		}
		if !plugin.ValidName(name) {
			t.Fatalf("rendered an invalid name %q", name)
		}
		for _, fl := range files {
			if fl.Path != plugin.ManifestFile {
				continue
			}
			m, _, err := plugin.ParseManifest(fl.Data)
			if err != nil {
				t.Fatalf("rendered manifest refused: %v", err)
			}
			if m.Plugin.Name != name || m.Command(name) == nil {
				t.Fatalf("manifest names %q, want %q", m.Plugin.Name, name)
			}
			return
		}
		t.Fatal("no manifest rendered")
	})
}
