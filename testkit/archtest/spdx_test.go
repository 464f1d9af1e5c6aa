// SPDX-License-Identifier: MIT

package archtest

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spdxLine opens every Go file of fledge's own: the licence is stated where the code is
// copied to, not only in LICENSE.
const spdxLine = "// SPDX-License-Identifier: MIT"

func TestEveryGoFileNamesItsLicence(t *testing.T) {
	root := moduleRoot(t)
	var missing []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// third_party keeps its own licence (its LICENSE and NOTICE); testdata holds
			// fixtures, some of them deliberately malformed.
			if rel == "third_party" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		if !sc.Scan() || sc.Text() != spdxLine {
			missing = append(missing, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("%d Go files do not start with %q:\n%s", len(missing), spdxLine, strings.Join(missing, "\n"))
	}
}
