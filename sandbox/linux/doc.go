// Package linux is fledge's Linux sandbox: a re-exec stub (package stub) applies
// no_new_privs, rlimits, a new session, the guarded working directory and a Landlock
// allow-list to each child; a cgroup per run bounds memory, pids and CPU and kills the whole
// process tree (cgroup.kill on the unified hierarchy, freezer on legacy v1, process group
// otherwise). The host process itself is never restricted.
//
// The package builds only on Linux; this file keeps it a valid (empty) package elsewhere.
package linux
