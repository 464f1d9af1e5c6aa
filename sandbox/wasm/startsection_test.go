// SPDX-License-Identifier: MIT

package wasm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/wasm"
)

// startSectionModule is a module whose start section (which wazero runs while it
// instantiates, whatever WithStartFunctions says) writes msg to stderr through WASI
// fd_write: guest code that runs as soon as the module is instantiated.
func startSectionModule(msg string) []byte { return startSectionWriter(msg, false) }

// startSectionWriter is startSectionModule, writing for ever when loop is set.
func startSectionWriter(msg string, loop bool) []byte {
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	// 0: () -> (); 1: (i32, i32, i32, i32) -> i32
	m = append(m, section(1, []byte{2, 0x60, 0, 0, 0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f})...)
	imp := []byte{1}
	imp = append(imp, wstr("wasi_snapshot_preview1")...)
	imp = append(imp, wstr("fd_write")...)
	imp = append(imp, 0x00, 1)
	m = append(m, section(2, imp)...)
	m = append(m, section(3, []byte{1, 0})...)
	m = append(m, section(5, []byte{1, 0, 1})...)
	exp := []byte{2}
	exp = append(exp, wstr("memory")...)
	exp = append(exp, 0x02, 0)
	exp = append(exp, wstr("_start")...)
	exp = append(exp, 0x00, 1)
	m = append(m, section(7, exp)...)
	m = append(m, section(8, []byte{1})...) // start: function 1
	// fd_write(2, iovs=0, 1, nwritten=16); drop
	code := []byte{0, 0x41, 2, 0x41, 0, 0x41, 1, 0x41, 16, 0x10, 0, 0x1a, opEnd}
	if loop {
		code = append([]byte{0, 0x03, 0x40}, append(code[1:len(code)-1], 0x0c, 0x00, 0x0b, opEnd)...)
	}
	m = append(m, section(10, append([]byte{1}, append(leb(uint32(len(code))), code...)...))...)
	data := make([]byte, 32, 32+len(msg))
	binary.LittleEndian.PutUint32(data[0:], 32)
	binary.LittleEndian.PutUint32(data[4:], uint32(len(msg)))
	data = append(data, msg...)
	seg := []byte{1, 0, 0x41, 0, opEnd}
	seg = append(seg, leb(uint32(len(data)))...)
	m = append(m, section(11, append(seg, data...))...)
	return m
}

// TestStartSectionWaitsForBeforeExec: nothing of a module runs before the launch's
// BeforeExec (the plugin_start record, durable) has said yes. The attack is a module with a
// start section, which runs during instantiation: with a BeforeExec that refuses (the audit
// log cannot take the record), its write must not happen. The control lets BeforeExec pass
// and sees the write, so the module does run its start section.
func TestStartSectionWaitsForBeforeExec(t *testing.T) {
	const msg = "start section ran"
	path := writeModule(t, t.TempDir(), "start.wasm", startSectionModule(msg))
	start := func(before func() error) (*bytes.Buffer, sandbox.Process, error) {
		w, err := wasm.New(wasm.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		var stderr bytes.Buffer
		spec := &sandbox.Spec{Kind: sandbox.KindPlugin, Name: "t", Path: path, Args: []string{path},
			Stderr: &stderr, BeforeExec: before}
		p, err := w.Start(context.Background(), spec)
		return &stderr, p, err
	}
	t.Run("refused", func(t *testing.T) {
		called := false
		stderr, _, err := start(func() error { called = true; return errors.New("audit log: disk full") })
		require.Error(t, err)
		assert.True(t, called, "BeforeExec was asked")
		assert.NotContains(t, stderr.String(), msg, "the module ran before its BeforeExec refused it")
	})
	t.Run("control", func(t *testing.T) {
		stderr, p, err := start(func() error { return nil })
		require.NoError(t, err)
		waitResult(t, p)
		assert.Contains(t, stderr.String(), msg)
	})
}

// loopingStartModule is a module whose start section loops for ever.
func loopingStartModule() []byte {
	m := assemble(nil, 1, loopForever)
	// The start section (id 8) goes between the export (7) and code (10) sections.
	i := len(m)
	for j := 8; j < len(m); {
		id, size := m[j], int(m[j+1]) // every section here is under 128 bytes
		if id == 10 {
			i = j
			break
		}
		j += 2 + size
	}
	out := append([]byte{}, m[:i]...)
	out = append(out, section(8, []byte{0})...) // start: function 0 (_start, no imports)
	return append(out, m[i:]...)
}

// TestStartSectionCannotHoldTheHost: a start section runs while Start instantiates the
// module, before there is a process the host could stop; one that never returns must not
// hold Start (and the plugin's session) for ever.
func TestStartSectionCannotHoldTheHost(t *testing.T) {
	t.Run("loop", func(t *testing.T) { startHeld(t, loopingStartModule(), nil) })
	t.Run("write to a pipe nobody reads", func(t *testing.T) {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		defer r.Close()
		defer w.Close()
		startHeld(t, startSectionWriter(strings.Repeat("x", 4000), true), w)
	})
	t.Run("write to a blocking pipe nobody reads", func(t *testing.T) {
		// Closing a blocking fd does not end a write(2) waiting in it: the start section
		// is abandoned instead, as a blocked _start is.
		var fds [2]int
		require.NoError(t, syscall.Pipe(fds[:]))
		r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
		defer func() {
			r.Close() // ends the abandoned write (EPIPE), so the module is closed
			w.Close()
		}()
		startHeld(t, startSectionWriter(strings.Repeat("x", 4000), true), w)
	})
}

func startHeld(t *testing.T, mod []byte, stderr *os.File) {
	path := writeModule(t, t.TempDir(), "held.wasm", mod)
	w, err := wasm.New(wasm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	type started struct {
		p   sandbox.Process
		err error
	}
	done := make(chan started, 1)
	go func() {
		spec := &sandbox.Spec{Kind: sandbox.KindPlugin, Name: "t", Path: path, Args: []string{path}}
		if stderr != nil {
			spec.Stderr = stderr
		}
		p, err := w.Start(context.Background(), spec)
		done <- started{p, err}
	}()
	select {
	case s := <-done:
		if s.err == nil {
			_ = s.p.Kill()
			waitResult(t, s.p)
		}
		require.Error(t, s.err, "a start section that never returns")
		assert.ErrorIs(t, s.err, wasm.ErrModule)
	case <-time.After(wasm.StartSectionBound + 20*time.Second):
		t.Fatal("Start is held by the module's start section")
	}
}
