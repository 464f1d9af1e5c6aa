// SPDX-License-Identifier: MIT

package darwin

import "sort"

// Proc is one row of a process-table snapshot (on macOS from sysctl kern.proc.all, taken by
// the unconfined host).
type Proc struct {
	Pid, Ppid, Pgid int
}

// TreeMembers returns, sorted, the pids of snapshot that belong to a run whose main process
// is root and whose process group is pgid: every member of the group, and every descendant
// (by parent pid) of root or of a member. The descendant rule catches a child that called
// setsid (new group) while its parent is still alive; an orphan that setsid'd is out of reach
// of any rule without cgroups, which is why macOS reports tree kill as "pgroup".
// Pids <= 1 and the ones in exclude (the host itself) are never returned.
func TreeMembers(snapshot []Proc, root, pgid int, exclude ...int) []int {
	skip := map[int]bool{}
	for _, p := range exclude {
		skip[p] = true
	}
	children := map[int][]int{}
	in := map[int]bool{}
	var queue []int
	mark := func(pid int) {
		if pid <= 1 || skip[pid] || in[pid] {
			return
		}
		in[pid] = true
		queue = append(queue, pid)
	}
	for _, p := range snapshot {
		children[p.Ppid] = append(children[p.Ppid], p.Pid)
	}
	for _, p := range snapshot {
		if p.Pid == root || (pgid > 1 && p.Pgid == pgid) {
			mark(p.Pid)
		}
	}
	// root may already be gone from the table while its children still name it as parent
	// (exited, not yet reparented in this snapshot): walk from it as well.
	if root > 1 && !skip[root] {
		queue = append(queue, root)
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			mark(c)
		}
	}
	out := make([]int, 0, len(in))
	for pid := range in {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}
