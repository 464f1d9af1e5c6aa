// SPDX-License-Identifier: MIT

package darwin

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTreeMembers(t *testing.T) {
	const host, root = 500, 600
	// launchd 1, host 500, our run 600 (group 600), an unrelated shell 700.
	base := []Proc{
		{Pid: 1, Ppid: 0, Pgid: 1},
		{Pid: host, Ppid: 1, Pgid: host},
		{Pid: root, Ppid: host, Pgid: root},
		{Pid: 700, Ppid: 1, Pgid: 700},
		{Pid: 701, Ppid: 700, Pgid: 700},
	}
	with := func(extra ...Proc) []Proc { return append(append([]Proc{}, base...), extra...) }
	cases := []struct {
		name string
		snap []Proc
		root int
		want []int
	}{
		{"just the main process", base, root, []int{root}},
		{"children and grandchildren in the group", with(
			Proc{Pid: 601, Ppid: root, Pgid: root},
			Proc{Pid: 602, Ppid: 601, Pgid: root},
		), root, []int{root, 601, 602}},
		{"setsid child of a live parent", with(
			Proc{Pid: 601, Ppid: root, Pgid: root},
			Proc{Pid: 610, Ppid: 601, Pgid: 610},
			Proc{Pid: 611, Ppid: 610, Pgid: 610}, // its own child, new group too
		), root, []int{root, 601, 610, 611}},
		{"orphan still in the group (background job after main exit)", with(
			Proc{Pid: 620, Ppid: 1, Pgid: root},
			Proc{Pid: 621, Ppid: 620, Pgid: 621}, // setsid child of that orphan
		), root, []int{root, 620, 621}},
		{"main gone, children still name it", []Proc{
			{Pid: 1, Ppid: 0, Pgid: 1},
			{Pid: 630, Ppid: root, Pgid: 630},
		}, root, []int{630}},
		{"never the host, launchd or strangers", with(
			Proc{Pid: host, Ppid: root, Pgid: root}, // a lying row cannot pull the host in
			Proc{Pid: 1, Ppid: root, Pgid: root},
		), root, []int{root}},
		{"setsid orphan is out of reach", with(
			Proc{Pid: 640, Ppid: 1, Pgid: 640},
		), root, []int{root}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, TreeMembers(tc.snap, tc.root, root, host))
		})
	}
	assert.Empty(t, TreeMembers(base, 0, 0, host), "no root and no group selects nothing")
	assert.Empty(t, TreeMembers(base, 1, 1), "pid 1 is never a member")
}
