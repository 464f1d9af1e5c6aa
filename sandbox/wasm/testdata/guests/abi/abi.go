//go:build wasip1

// Package abi is the raw fledge WASM ABI (send, recv, exit) for the test guests, written
// against the ABI itself rather than the SDK so the tests see exactly what a module sees.
package abi

import (
	"bytes"
	"encoding/json"
	"unsafe"
)

//go:wasmimport fledge send
func send(ptr unsafe.Pointer, n uint32)

//go:wasmimport fledge recv
func recv(ptr unsafe.Pointer, max uint32) uint32

//go:wasmimport fledge exit
func exit(code uint32)

// SendRaw sends b as one message.
func SendRaw(b []byte) {
	if len(b) == 0 {
		send(nil, 0)
		return
	}
	send(unsafe.Pointer(&b[0]), uint32(len(b)))
}

// Send sends v as JSON.
func Send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	SendRaw(b)
}

// Output sends an output message.
func Output(s string) { Send(map[string]any{"type": "output", "text": s}) }

// RecvChunk is one raw recv call into a buffer of n bytes.
func RecvChunk(n int) []byte {
	buf := make([]byte, n)
	got := recv(unsafe.Pointer(&buf[0]), uint32(n))
	return buf[:got]
}

// Recv reads one whole message with a buffer of bufSize bytes, calling recv until the
// message's closing newline; nil when nothing is pending. Calls counts the recv calls.
func Recv(bufSize int) (msg []byte, calls int) {
	for {
		b := RecvChunk(bufSize)
		calls++
		if len(b) == 0 {
			return msg, calls
		}
		msg = append(msg, b...)
		if bytes.HasSuffix(msg, []byte("\n")) {
			return msg, calls
		}
	}
}

// Init is the part of init the guests use.
type Init struct {
	Type string   `json:"type"`
	Args []string `json:"args"`
}

// ReadInit receives and decodes init.
func ReadInit() Init {
	m, _ := Recv(4096)
	var in Init
	if err := json.Unmarshal(m, &in); err != nil {
		panic("init: " + err.Error() + ": " + string(m))
	}
	return in
}

// Exit ends the module through fledge.exit.
func Exit(code int) { exit(uint32(code)) }
