// SPDX-License-Identifier: MIT

package wasm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fledgehq/fledge/third_party/wazero/api"
	"github.com/fledgehq/fledge/third_party/wazero/sys"

	"github.com/fledgehq/fledge/protocol"
)

// hostIDPrefix marks the ids of requests made for host functions; a guest message using
// it is dropped so the guest cannot answer for, or steal, the host's replies.
const hostIDPrefix = "fledge-wasm-"

// maxWarnings bounds the warnings one module prints to stderr about what it sent.
const maxWarnings = 20

// errStopped: the module was stopped while a host function waited.
var errStopped = errors.New("plugin stopped")

// guest is the fledge side of the module's ABI. Every method but readLoop runs on the
// module's goroutine (host functions and WASI writes are called from there), so the state
// below needs no lock; readLoop only feeds lines.
type guest struct {
	p     *process
	out   io.Writer
	lines chan []byte // lines from the session, in order; closed at EOF

	initSeen    bool
	ready       [][]byte            // messages for recv, oldest first, each ending in '\n'
	partial     []byte              // the rest of a message recv delivered in part
	outstanding map[string]struct{} // ids of requests the guest sent with send
	nextID      uint64
	carry       []byte // an incomplete UTF-8 sequence at the end of a stdout write
	warned      int
}

func newGuest(p *process) *guest {
	return &guest{p: p, out: p.stdout, lines: make(chan []byte, 64), outstanding: map[string]struct{}{}}
}

func (g *guest) warnf(format string, args ...any) {
	g.warned++
	if g.warned <= maxWarnings {
		fmt.Fprintf(g.p.stderr, "fledge: wasm plugin: "+format+"\n", args...)
	}
}

// readLoop reads the session's lines (bounded) until EOF or until the module is stopped.
func (g *guest) readLoop() {
	defer close(g.lines)
	br := bufio.NewReaderSize(g.p.stdin, 64<<10)
	max := g.p.opts.InboundMax
	for {
		var line []byte
		tooLong := false
		for {
			chunk, err := br.ReadSlice('\n')
			if !tooLong {
				if len(line)+len(chunk) > max+1 {
					tooLong = true
					line = nil
				} else {
					line = append(line, chunk...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if len(line) > 0 && !tooLong {
					g.push(bytes.TrimRight(line, "\r\n"))
				}
				return
			}
			break
		}
		if tooLong {
			// fledge never writes such a line (its writer has the same bound); say so
			// rather than hang a host function waiting for it.
			fmt.Fprintf(g.p.stderr, "fledge: wasm plugin: a message from fledge longer than %d bytes was dropped\n", max)
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		if !g.push(line) {
			return
		}
	}
}

func (g *guest) push(line []byte) bool {
	select {
	case g.lines <- line:
		return true
	case <-g.p.stopped:
		return false
	}
}

// next returns the next line from the session; block says whether to wait for one.
func (g *guest) next(block bool) ([]byte, bool) {
	if block {
		select {
		case l, ok := <-g.lines:
			return l, ok
		case <-g.p.stopped:
			return nil, false
		}
	}
	select {
	case l, ok := <-g.lines:
		return l, ok
	default:
		return nil, false
	}
}

type envelope struct {
	Type   string          `json:"type"`
	ID     json.RawMessage `json:"id"`
	Value  json.RawMessage `json:"value"`
	Reason string          `json:"reason"`
}

// keep files an inbound message for recv, and marks the guest's request it answers.
func (g *guest) keep(line []byte) {
	g.initSeen = true
	var e envelope
	if json.Unmarshal(line, &e) == nil && len(e.ID) > 0 && (e.Type == protocol.TypeResponse || e.Type == protocol.TypeCancel) {
		delete(g.outstanding, string(e.ID))
	}
	if len(g.ready) >= maxInbox {
		g.warnf("more than %d messages from fledge not received; one was dropped", maxInbox)
		return
	}
	g.ready = append(g.ready, append(line, '\n'))
}

// recv copies the pending inbound message into the guest's buffer and returns its length:
// first init, then replies and other messages in order. A message longer than maxLen is
// delivered over successive calls (the reference ABI). With nothing pending it returns 0 at
// once, unless init has not come yet or the guest is waiting for the answer to a request it
// sent: then it waits for the next message (a module cannot do anything else meanwhile).
// Each message ends in a newline, which JSON parsers accept as trailing space and which
// lets a streaming reader find message boundaries.
func (g *guest) recv(_ context.Context, m api.Module, ptr, maxLen uint32) uint32 {
	if int32(maxLen) <= 0 {
		return 0
	}
	for g.partial == nil && len(g.ready) == 0 {
		line, ok := g.next(!g.initSeen || len(g.outstanding) > 0)
		if !ok {
			return 0
		}
		g.keep(line)
	}
	msg := g.partial
	if msg == nil {
		msg = g.ready[0]
		g.ready[0] = nil
		g.ready = g.ready[1:]
	}
	n := min(uint32(len(msg)), maxLen)
	if !m.Memory().Write(ptr, msg[:n]) {
		panic(fmt.Errorf("fledge.recv: buffer [%d, %d) is outside the module's memory", ptr, uint64(ptr)+uint64(maxLen)))
	}
	if int(n) < len(msg) {
		g.partial = msg[n:]
	} else {
		g.partial = nil
	}
	return n
}

// read copies len bytes at ptr out of guest memory; out of range traps the module.
func read(m api.Module, fn string, ptr, n uint32) []byte {
	b, ok := m.Memory().Read(ptr, n)
	if !ok {
		panic(fmt.Errorf("fledge.%s: [%d, %d) is outside the module's memory", fn, ptr, uint64(ptr)+uint64(n)))
	}
	return bytes.Clone(b)
}

// writeLine sends one message line to the session. A session that stopped reading ends the
// module, as a closed pipe ends a native plugin.
func (g *guest) writeLine(b []byte) {
	b = append(b, '\n')
	if _, err := g.out.Write(b); err != nil {
		g.p.stop(stopPipe)
		panic(fmt.Errorf("%w: fledge stopped reading: %v", errStopped, err))
	}
}

// send forwards one fledge-v1 message from the guest, unchanged but for whitespace, to the
// session, which handles it exactly as a native plugin's line. Malformed JSON is dropped
// with a warning, as the reference does.
func (g *guest) send(_ context.Context, m api.Module, ptr, n uint32) {
	if int(n) > g.p.opts.MessageMax {
		g.warnf("a message of %d bytes (more than %d) was dropped", n, g.p.opts.MessageMax)
		return
	}
	raw := read(m, "send", ptr, n)
	var buf bytes.Buffer
	// Compact: a pretty-printed message would otherwise span several protocol lines.
	if err := json.Compact(&buf, raw); err != nil {
		g.warnf("malformed message dropped: %v", err)
		return
	}
	var e envelope
	_ = json.Unmarshal(buf.Bytes(), &e)
	if len(e.ID) > 0 {
		var s string
		if json.Unmarshal(e.ID, &s) == nil && strings.HasPrefix(s, hostIDPrefix) {
			g.warnf("message with reserved id %q dropped", s)
			return
		}
		if protocol.RequiresID(e.Type) && len(g.outstanding) < maxInbox {
			g.outstanding[string(e.ID)] = struct{}{}
		}
	}
	g.writeLine(buf.Bytes())
}

// request sends a host function's fledge-v1 request and waits for its reply, keeping every
// other inbound message for recv. It returns the response value, or the reason of a cancel.
func (g *guest) request(build func(id protocol.ID) any) (value json.RawMessage, cancelled string) {
	g.nextID++
	id := protocol.StringID(hostIDPrefix + strconv.FormatUint(g.nextID, 10))
	line, err := protocol.Encode(build(id))
	if err != nil {
		panic(fmt.Errorf("fledge: encode request: %w", err))
	}
	g.writeLine(bytes.TrimRight(line, "\n"))
	for {
		l, ok := g.next(true)
		if !ok {
			return nil, "session_ended"
		}
		var e envelope
		if json.Unmarshal(l, &e) == nil && bytes.Equal(e.ID, id) {
			switch e.Type {
			case protocol.TypeResponse:
				return e.Value, ""
			case protocol.TypeCancel:
				return nil, e.Reason
			}
		}
		g.keep(l)
	}
}

// reply makes value the next thing recv returns and returns its length (the host
// function's result).
func (g *guest) reply(value []byte) uint32 {
	if g.partial != nil {
		g.warnf("the rest of a message not fully received was dropped for a host-function reply")
		g.partial = nil
	}
	msg := append(bytes.Clone(value), '\n')
	g.ready = append([][]byte{msg}, g.ready...)
	return uint32(len(msg))
}

// execRequest is the guest's exec argument: the reference's {command, cwd?, timeout?}.
type execRequest struct {
	Command string   `json:"command"`
	Cwd     string   `json:"cwd"`
	Timeout *float64 `json:"timeout"`
}

func execFailure(msg string) []byte {
	b, _ := json.Marshal(protocol.ExecResult{Code: -1, Stderr: msg, Reason: "error"})
	return b
}

// exec turns the guest's request into a fledge-v1 exec, answered by the session's exec path
// (pathguard, sandbox, limits, audit). The reply {code, stdout, stderr, ...} is read with
// recv; the result is its length.
func (g *guest) exec(_ context.Context, m api.Module, ptr, n uint32) uint32 {
	if int(n) > g.p.opts.MessageMax {
		return g.reply(execFailure(fmt.Sprintf("fledge: exec request longer than %d bytes", g.p.opts.MessageMax)))
	}
	var req execRequest
	if err := json.Unmarshal(read(m, "exec", ptr, n), &req); err != nil {
		return g.reply(execFailure("fledge: malformed exec request: " + err.Error()))
	}
	v, cancelled := g.request(func(id protocol.ID) any {
		return protocol.Exec{ID: id, Command: req.Command, Cwd: req.Cwd, Timeout: req.Timeout}
	})
	if v == nil {
		return g.reply(execFailure("fledge: exec cancelled: " + cancelled))
	}
	return g.reply(v)
}

type storeRequest struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// storeSet forwards {key, value} as a fledge-v1 store (fire and forget, as for a native
// plugin: a refused store is warned about and recorded by the session).
func (g *guest) storeSet(_ context.Context, m api.Module, ptr, n uint32) {
	if int(n) > g.p.opts.MessageMax {
		g.warnf("store_set of %d bytes (more than %d) dropped", n, g.p.opts.MessageMax)
		return
	}
	var req storeRequest
	if err := json.Unmarshal(read(m, "store_set", ptr, n), &req); err != nil {
		g.warnf("malformed store_set dropped: %v", err)
		return
	}
	line, err := protocol.Encode(protocol.Store{Key: req.Key, Value: req.Value})
	if err != nil {
		g.warnf("store_set dropped: %v", err)
		return
	}
	g.writeLine(bytes.TrimRight(line, "\n"))
}

// storeGet: the key's bytes; the reply (a JSON string, or null) is read with recv.
func (g *guest) storeGet(_ context.Context, m api.Module, ptr, n uint32) uint32 {
	if int(n) > g.p.opts.MessageMax {
		return g.reply([]byte("null"))
	}
	key := read(m, "store_get", ptr, n)
	if !utf8.Valid(key) {
		return g.reply([]byte("null"))
	}
	v, _ := g.request(func(id protocol.ID) any { return protocol.Load{ID: id, Key: string(key)} })
	if v == nil {
		v = json.RawMessage("null")
	}
	return g.reply(v)
}

// metadata: a JSON array of keys; the reply (an object of key -> value) is read with recv.
func (g *guest) metadata(_ context.Context, m api.Module, ptr, n uint32) uint32 {
	var keys []string
	if int(n) > g.p.opts.MessageMax || json.Unmarshal(read(m, "metadata", ptr, n), &keys) != nil {
		return g.reply([]byte("{}"))
	}
	if keys == nil {
		keys = []string{}
	}
	v, _ := g.request(func(id protocol.ID) any { return protocol.Metadata{ID: id, Keys: keys} })
	if v == nil || string(v) == "null" {
		v = json.RawMessage("{}")
	}
	return g.reply(v)
}

// exit ends the module with code (0 is success).
func (g *guest) exit(ctx context.Context, m api.Module, code uint32) {
	_ = m.CloseWithExitCode(ctx, code)
	panic(sys.NewExitError(code))
}

// outputWriter is the module's WASI stdout: each write becomes fledge-v1 output messages.
func (g *guest) outputWriter() io.Writer { return outputWriter{g} }

type outputWriter struct{ g *guest }

func (w outputWriter) Write(b []byte) (int, error) {
	w.g.output(b, false)
	return len(b), nil
}

// output sends b as output messages of at most outputChunk bytes of text, never splitting
// a UTF-8 sequence (an incomplete one at the end waits for the next write).
func (g *guest) output(b []byte, final bool) {
	if len(g.carry) > 0 {
		b = append(g.carry, b...)
		g.carry = nil
	}
	if !final {
		// Keep back an incomplete UTF-8 sequence at the end (at most 3 bytes).
		for i := 1; i <= 3 && i <= len(b); i++ {
			c := b[len(b)-i]
			if c < 0x80 {
				break
			}
			if utf8.RuneStart(c) {
				if !utf8.FullRune(b[len(b)-i:]) {
					g.carry = bytes.Clone(b[len(b)-i:])
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	for len(b) > 0 {
		n := min(len(b), outputChunk)
		for n < len(b) && n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		if n == 0 {
			n = min(len(b), outputChunk)
		}
		line, err := protocol.Encode(protocol.Output{Text: string(b[:n])})
		if err == nil {
			g.writeLine(bytes.TrimRight(line, "\n"))
		}
		b = b[n:]
	}
}

// flushOutput sends what is left of the stdout carry when the module ends.
func (g *guest) flushOutput() {
	if len(g.carry) > 0 {
		defer func() { _ = recover() }() // the session may be gone: nothing to tell it
		g.output(nil, true)
	}
}
