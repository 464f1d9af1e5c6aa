// SPDX-License-Identifier: MIT

// Package linux is fledge's Linux sandbox. The host process itself is never restricted.
//
// Launch (Options.Launch): by default a throwaway OS thread of the host takes on the
// child's confinement and forks it (thread_linux.go): unshare(CLONE_FS), CLONE_NEWIPC (an
// IPC namespace per run, ipc_linux.go) and CLONE_NEWNET for network=deny, fchdir into the guarded directory handle, join the run's
// v1 cgroups with its tid, the private filesystem view (as root: a mount namespace with
// only the grants, entered by path and checked against the handle; the system paths
// idmapped so that root's files are nobody's, rootonly_linux.go), no_new_privs, the
// capability drop, unshare(CLONE_FILES) and every fd >= 3 close-on-exec, then a vfork
// (clone3, CLONE_INTO_CGROUP) whose child takes its stdio, setsid (no controlling
// terminal), RLIMIT_CORE=0 and RLIMIT_NOFILE, makes the command's Landlock domain and
// installs the seccomp deny-list itself before execve (execChild, the session launcher's
// child's steps too): the thread is never in the command's domain nor under its filter.
// LaunchStub re-executes the stub (package stub) instead, which does the same steps in
// itself (joining v1 groups through cgroup.procs), at the cost of a Go runtime start per
// run. The kernel steps are package sandbox/kernel, shared by both.
//
// Without root (no CAP_SYS_ADMIN) but with user namespaces, every run uses the stub,
// started in new user (uid/gid mapped to themselves), mount and pid namespaces with
// CAP_SYS_ADMIN as an ambient capability, so it can build the same view with a /proc of
// the run's own; it stays pid 1 of the run as a minimal init (stub.Policy.Init) that forks
// the program, forwards signals, reaps orphans and relays the program's wait status on a
// status pipe (userns_linux.go).
//
// Host death (guard_linux.go): each sandbox starts a watchdog process on first use and
// registers every tree's cgroups with it before the tree starts; if the host dies by any
// signal the watchdog kills them.
//
// Ordering, so that no process escapes its cgroup: the unified group is entered at clone
// time (CLONE_INTO_CGROUP); v1 controller groups (hybrid/legacy: memory, pids, cpu,
// freezer) are joined by the launching thread or the stub before exec, so every process
// the command ever forks is born inside them.
//
// Landlock: the best ABI the kernel has (up to kernel.MaxLandlockABI). Read-write:
// Access.ReadWrite, the private tmp and /dev/null. Read-only: Access.ReadOnly, /etc,
// /proc (ps, /dev/fd; other processes' environ/mem stay out of reach because Landlock also
// scopes ptrace), /dev/{zero,full,random,urandom}. Read+exec: Access.ReadExec (callers
// pass SystemReadExec plus PATH entries). Never /dev/tty, /sys, /run, /dev/shm, $HOME. With
// ABI >= 6 signals and abstract unix sockets are scoped to the domain, with ABI >= 7
// denials of exec'd programs are logged. Network=false: Landlock TCP bind/connect (ABI >=
// 4, UDP too at >= 10) plus an empty network namespace when unshare(CLONE_NEWNET) works.
//
// TIOCSTI: the child has no controlling terminal (new session) and never a tty fd: a
// terminal given as stdio is copied through a pipe (stub.OpenStdio), and /dev/tty is not
// in the Landlock allow-list.
//
// Tree kill: cgroup.kill on the unified group (hybrid and v2), freeze + SIGKILL + thaw with
// the v1 freezer (legacy), SIGKILL to the init stub of a user-namespace run (the kernel
// then kills its whole pid namespace), the process group otherwise (degraded: setsid
// escapes).
//
// The package builds only on Linux; this file keeps it a valid (empty) package elsewhere.
package linux
