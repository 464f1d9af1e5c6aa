// SPDX-License-Identifier: MIT

package tools

import "sync"

// CloseSessions ends every session of a provider at once and waits for all of them: a
// provider's Close. The caller has already taken them out of its map under its own lock,
// so no new call finds one being closed.
func CloseSessions[S any](sessions []S, stop func(S)) {
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop(s)
		}()
	}
	wg.Wait()
}

// TakeAll empties a provider's session map and returns what it held (call with the
// provider's lock held).
func TakeAll[K comparable, S any](m map[K]S) []S {
	out := make([]S, 0, len(m))
	for k, s := range m {
		out = append(out, s)
		delete(m, k)
	}
	return out
}
