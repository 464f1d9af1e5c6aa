//go:build unix && !linux

package safefs

// openBeneath walks rel element by element (O_NOFOLLOW each): these systems have no
// openat2, and the walk refuses every symlink just as RESOLVE_NO_SYMLINKS does.
func openBeneath(root, rel string, rfd int, elems []string) (int, error) {
	return walk(root, rel, rfd, elems, false, 0)
}
