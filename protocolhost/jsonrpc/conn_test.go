// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/sandbox"
)

// pipePeer is the plugin end of a conn over real pipes: the test reads fledge's requests
// and writes whatever answers (or non-answers) the case needs.
type pipePeer struct {
	t        *testing.T
	requests chan map[string]any
	out      *os.File
	mu       sync.Mutex
}

func newPipeConn(t *testing.T, lineMax, maxPending int) (*conn, *pipePeer, *[]string) {
	t.Helper()
	inR, inW, err := os.Pipe() // fledge -> plugin
	require.NoError(t, err)
	outR, outW, err := os.Pipe() // plugin -> fledge
	require.NoError(t, err)
	t.Cleanup(func() { inR.Close(); inW.Close(); outR.Close(); outW.Close() })
	peer := &pipePeer{t: t, requests: make(chan map[string]any, 16), out: outW}
	go func() {
		sc := bufio.NewScanner(inR)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				peer.requests <- m
			}
		}
	}()
	var warnings []string
	var wmu sync.Mutex
	rec := core.NewRecorder(nil, "test", nil, sandbox.Report{}, nil)
	c := newConn("peer", &core.Proc{Stdin: inW, Stdout: outR}, rec, lineMax, maxPending, func(s string) {
		wmu.Lock()
		warnings = append(warnings, s)
		wmu.Unlock()
	})
	return c, peer, &warnings
}

func (p *pipePeer) write(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.out.WriteString(line + "\n")
	require.NoError(p.t, err)
}

func (p *pipePeer) next() map[string]any {
	select {
	case m := <-p.requests:
		return m
	case <-time.After(10 * time.Second):
		p.t.Fatal("no request reached the plugin")
	}
	return nil
}

func TestConnAnswersByID(t *testing.T) {
	c, peer, _ := newPipeConn(t, 1<<20, 8)
	done := make(chan json.RawMessage, 1)
	go func() {
		raw, err := c.Call(context.Background(), "tool/execute", map[string]any{"name": "x"}, 5*time.Second, nil)
		assert.NoError(t, err)
		done <- raw
	}()
	req := peer.next()
	assert.Equal(t, "2.0", req["jsonrpc"])
	assert.Equal(t, "tool/execute", req["method"])
	peer.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"success":true,"result":"ok"}}`, req["id"]))
	assert.JSONEq(t, `{"success":true,"result":"ok"}`, string(<-done))
}

func TestConnPendingBound(t *testing.T) {
	c, peer, _ := newPipeConn(t, 1<<20, 2)
	for i := 0; i < 2; i++ {
		go func() { _, _ = c.Call(context.Background(), "hook/x", nil, 10*time.Second, nil) }()
		peer.next()
	}
	_, err := c.Call(context.Background(), "hook/x", nil, time.Second, nil)
	require.ErrorIs(t, err, ErrLimit)
	assert.Contains(t, err.Error(), "2 requests already in flight")
}

func TestConnLateAnswerIsNotMalformed(t *testing.T) {
	c, peer, warnings := newPipeConn(t, 1<<20, 8)
	_, err := c.Call(context.Background(), "hook/slow", nil, 50*time.Millisecond, nil)
	require.ErrorIs(t, err, ErrTimeout)
	late := peer.next()
	peer.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, late["id"]))
	// A wrong id is malformed; the late one was not (the warning names only the wrong one).
	peer.write(`{"jsonrpc":"2.0","id":999,"result":{}}`)
	peer.write(`not json`)
	go func() { _, _ = c.Call(context.Background(), "hook/fast", nil, 5*time.Second, nil) }()
	fast := peer.next()
	peer.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, fast["id"]))
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.malformed == 2
	}, 5*time.Second, 10*time.Millisecond)
	assert.True(t, c.hasExpired() == false, "the late answer cleared its expired id")
	require.Len(t, *warnings, 1)
	assert.Contains(t, (*warnings)[0], "an answer to no pending request (id 999)")
}

func TestConnRPCErrorAndMissingResult(t *testing.T) {
	c, peer, _ := newPipeConn(t, 1<<20, 8)
	errs := make(chan error, 2)
	go func() {
		_, err := c.Call(context.Background(), "a", nil, 5*time.Second, nil)
		errs <- err
	}()
	r := peer.next()
	peer.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"error":{"code":-32601,"message":"Unknown method"}}`, r["id"]))
	err := <-errs
	var re *RPCError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, -32601, re.Code)
	go func() {
		_, err := c.Call(context.Background(), "b", nil, 5*time.Second, nil)
		errs <- err
	}()
	r = peer.next()
	peer.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":"%v"}`, r["id"])) // a string id is matched too
	assert.ErrorIs(t, <-errs, ErrMalformed)
}

func TestConnEOFFailsPending(t *testing.T) {
	c, peer, _ := newPipeConn(t, 1<<20, 8)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), "a", nil, 10*time.Second, nil)
		errs <- err
	}()
	peer.next()
	peer.out.Close()
	err := <-errs
	require.ErrorIs(t, err, ErrGone)
	_, err = c.Call(context.Background(), "b", nil, time.Second, nil)
	assert.ErrorIs(t, err, ErrGone, "a dead plugin answers no more")
	assert.True(t, strings.Contains(err.Error(), "closed its output"))
}

func TestRPCErrorMessageIsPrintable(t *testing.T) {
	msg := (&RPCError{Code: 1, Message: "a\x1b]52;c;ZXZpbA==\x07b\nc"}).Error()
	assert.NotContains(t, msg, "\x1b")
	assert.NotContains(t, msg, "\x07")
	assert.NotContains(t, msg, "\n")
	assert.Contains(t, msg, "a?]52;c;ZXZpbA==?b?c")
}
