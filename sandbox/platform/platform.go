// Package platform picks the best sandbox for this OS: Landlock + cgroups on Linux, the
// restricted fallback elsewhere (and on macOS until sandbox/darwin exists).
package platform

// Options configure New.
type Options struct {
	// StubPath is the executable whose main calls stub.MaybeRun first (default
	// os.Executable()).
	StubPath string
	// CgroupParent is the parent of run cgroups relative to each hierarchy's root (Linux;
	// default: fledge's own cgroup).
	CgroupParent string
}
