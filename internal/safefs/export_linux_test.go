// SPDX-License-Identifier: MIT

package safefs

import "testing"

// forceWalk makes the test use the element-by-element walk instead of openat2.
var forceWalk = func(t *testing.T) {
	was := noOpenat2.Load()
	noOpenat2.Store(true)
	t.Cleanup(func() { noOpenat2.Store(was) })
}
