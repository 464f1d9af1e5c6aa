// SPDX-License-Identifier: MIT

//go:build wasip1

package sdk

import (
	"bytes"
	"io"
	"time"
	"unsafe"
)

// In a WASM plugin (GOOS=wasip1 GOARCH=wasm) the SDK speaks the same fledge-v1 messages
// through fledge's host functions instead of stdin and stdout: send takes one outbound
// message, recv copies the next inbound one (in parts if the buffer is smaller). Requests
// (exec, load, metadata, prompts) are sent as ordinary messages with an id, so the SDK needs
// no capability-gated import and a module built with it instantiates under any grants.
// The guest's own stdout still reaches the user: fledge turns it into output messages.

//go:wasmimport fledge send
func fledgeSend(ptr unsafe.Pointer, n uint32)

//go:wasmimport fledge recv
func fledgeRecv(ptr unsafe.Pointer, max uint32) uint32

func transport() (io.Reader, io.Writer) {
	wake := make(chan struct{}, 1)
	return &wasmReader{wake: wake}, &wasmWriter{wake: wake}
}

// maxIdle bounds the pause between two empty recv calls. Every message we send wakes the
// reader at once, and fledge's recv waits by itself while a request of ours is unanswered, so
// the pause only delays messages nobody asked for (a session-wide cancel).
const maxIdle = 20 * time.Millisecond

type wasmReader struct{ wake chan struct{} }

// Read returns what recv delivers; fledge ends every message with a newline, so the
// protocol reader above finds the message boundaries however the bytes were split.
func (r *wasmReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	idle := time.Millisecond
	for {
		if n := fledgeRecv(unsafe.Pointer(&p[0]), uint32(len(p))); n > 0 {
			return int(n), nil
		}
		// Nothing pending: let the plugin's other goroutines run until one sends something
		// (a request whose answer recv will then wait for) or the pause is over.
		t := time.NewTimer(idle)
		select {
		case <-r.wake:
			idle = time.Millisecond
		case <-t.C:
			idle = min(2*idle, maxIdle)
		}
		t.Stop()
	}
}

type wasmWriter struct {
	pending []byte
	wake    chan struct{}
}

// Write sends each complete line as one message (the protocol writer writes whole lines).
func (w *wasmWriter) Write(p []byte) (int, error) {
	w.pending = append(w.pending, p...)
	for {
		i := bytes.IndexByte(w.pending, '\n')
		if i < 0 {
			return len(p), nil
		}
		if i > 0 {
			fledgeSend(unsafe.Pointer(&w.pending[0]), uint32(i))
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		w.pending = w.pending[i+1:]
	}
}
