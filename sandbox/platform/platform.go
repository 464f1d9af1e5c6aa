// SPDX-License-Identifier: MIT

// Package platform picks the best sandbox for this OS: Landlock + cgroups (+ seccomp) on
// Linux, Seatbelt on macOS, the restricted fallback elsewhere. It is the only package that
// imports a backend; everything else sees the sandbox.Sandbox interface.
package platform

// Options configure New.
type Options struct {
	// StubPath is the executable whose main calls stub.MaybeRun first (default
	// os.Executable()).
	StubPath string
	// CgroupParent is the parent of run cgroups relative to each hierarchy's root (Linux;
	// default: fledge's own cgroup).
	CgroupParent string
	// Launch: a plugin is launched right after (`fledge <command>`), so the backend may
	// start its helper processes while it probes (Linux).
	Launch bool
}
