// SPDX-License-Identifier: MIT

package sdk

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocol"
)

// waitLimit bounds every wait in these tests, so a bug fails a test instead of hanging it.
const waitLimit = 10 * time.Second

// fakeHost is the host side of a session: it speaks fledge-v1 through the protocol package's
// Reader and Writer over pipes, as fledge does over the plugin's stdin and stdout.
type fakeHost struct {
	t        *testing.T
	r        *protocol.Reader // what the plugin writes
	w        *protocol.Writer // what the plugin reads
	toPlugin *io.PipeWriter
	msgs     chan *protocol.Message
}

func testInit() protocol.Init {
	return protocol.Init{Protocol: protocol.Version, Command: "deploy", Args: []string{"staging", "--dry-run"},
		Plugin:       protocol.PluginInfo{Name: "hello", Version: "0.1.0", Dir: "/plugins/hello"},
		Fledge:       protocol.FledgeInfo{Version: "0.1.0"},
		Capabilities: protocol.Capabilities{Exec: true, Store: true, Metadata: true, Filesystem: "project"}}
}

// pipes returns the fake host and the plugin's ends of the two pipes.
func pipes(t *testing.T) (*fakeHost, io.Reader, io.Writer) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &fakeHost{t: t, r: protocol.NewReader(outR, protocol.ReaderOptions{}), w: protocol.NewWriter(inW),
		toPlugin: inW, msgs: make(chan *protocol.Message, 64)}
	go func() {
		defer close(h.msgs)
		for {
			m, err := h.r.Next()
			if errors.Is(err, protocol.ErrSkipped) {
				t.Errorf("plugin wrote a line the host skips: %v", err)
				continue
			}
			if err != nil {
				return
			}
			h.msgs <- m
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		outR.Close()
		outW.Close()
	})
	return h, inR, outW
}

// session starts a plugin connected to a fake host that has sent init.
func session(t *testing.T, opts ...Option) (*fakeHost, *Plugin) {
	h, r, w := pipes(t)
	go h.send(testInit())
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	p, err := Connect(ctx, r, w, opts...)
	require.NoError(t, err)
	return h, p
}

func (h *fakeHost) send(v any) {
	if err := h.w.Send(v); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		h.t.Errorf("host send: %v", err)
	}
}

// recv returns the next message the plugin sent.
func (h *fakeHost) recv() *protocol.Message {
	h.t.Helper()
	select {
	case m, ok := <-h.msgs:
		require.True(h.t, ok, "plugin output closed")
		return m
	case <-time.After(waitLimit):
		h.t.Fatal("no message from the plugin")
		return nil
	}
}

// serve answers every request with answer(m); a nil answer leaves the request pending.
func (h *fakeHost) serve(answer func(m *protocol.Message) any) {
	go func() {
		for m := range h.msgs {
			if id := m.RequestID(); id != nil {
				if v := answer(m); v != nil {
					h.send(v)
				}
			}
		}
	}()
}
