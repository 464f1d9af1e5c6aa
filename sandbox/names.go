// SPDX-License-Identifier: MIT

package sandbox

import "strings"

// SafeName turns a run's label (a plugin name: never trusted as a path) into a component
// for cgroup and temp-dir names: [A-Za-z0-9_-] only, at most 32 bytes, "run" if empty.
func SafeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 32 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "run"
	}
	return b.String()
}

// WithEnv returns a copy of env with key=value set, earlier values of key removed.
func WithEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}
