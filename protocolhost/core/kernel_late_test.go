// SPDX-License-Identifier: MIT

package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
)

// A run's Landlock refusals reach the host through the kernel's audit after the run
// ended, so the sandbox hands them over late (Spec.KernelDenialsLate) instead of holding
// the exec's reply. The session's end waits for them: they are on record before the
// session's plugin_exit, never after it or lost.
func TestLateKernelRefusalsBeforeSessionEnd(t *testing.T) {
	l, path := budgetLog(t)
	r := NewRecorder(l, "s", &audit.PluginRef{Name: "p"}, sandbox.Report{}, nil)
	var spec sandbox.Spec
	r.ObserveKernel(&spec, "ls $HOME")
	require.NotNil(t, spec.KernelDenialsLate, "every session takes its runs' refusals late")

	// What the sandbox does when the run's Wait returns: the settle goes on elsewhere.
	settled := make(chan struct{})
	spec.KernelDenialsLate(settled)
	go func() {
		time.Sleep(100 * time.Millisecond)
		spec.KernelDenials(sandbox.KernelDenial{Kind: "landlock", Path: "/home/u", Access: "fs.read_dir", Count: 1})
		close(settled)
	}()
	r.Close()
	r.Record(audit.EventPluginExit, audit.Allow, reason.OK, nil, true)

	var events []string
	require.NoError(t, audit.Read(path, func(rec *audit.Record) error {
		events = append(events, rec.Event)
		return nil
	}))
	assert.Equal(t, []string{audit.EventKernelDenied, audit.EventPluginExit}, events)
}

// Settled runs are not kept: a long session holds only the runs still settling.
func TestLateKernelRefusalsPruned(t *testing.T) {
	r := NewRecorder(nil, "s", &audit.PluginRef{Name: "p"}, sandbox.Report{}, nil)
	for range 1000 {
		c := make(chan struct{})
		close(c)
		r.awaitLate(c)
	}
	open := make(chan struct{})
	r.awaitLate(open)
	r.lateMu.Lock()
	n := len(r.late)
	r.lateMu.Unlock()
	assert.Equal(t, 1, n)
	close(open)
	r.SettleKernel()
}
