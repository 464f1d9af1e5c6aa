// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fledgehq/fledge/protocol/lines"
	"github.com/fledgehq/fledge/ui/clip"
)

var (
	// ErrLineTooLong: the server sent a line over policy's line_max.
	ErrLineTooLong = lines.ErrTooLong
	// ErrFlood: the server sent notifications or requests faster than fledge takes them.
	ErrFlood = errors.New("MCP server flooded fledge with messages")
	// ErrUnknownID: the server answered a request fledge never sent.
	ErrUnknownID = errors.New("MCP server answered a request fledge never sent")
	// ErrMalformed: the server wrote lines that are not JSON-RPC messages.
	ErrMalformed = errors.New("MCP server wrote malformed messages")
	// ErrTooManyPending: fledge itself has too many requests in flight to this server.
	ErrTooManyPending = errors.New("too many MCP requests in flight")
)

// connLimits bound what one server may make fledge hold.
type connLimits struct {
	// LineMax bounds one line (policy's line_max): a longer line ends the session without
	// ever being held in memory.
	LineMax int
	// Burst and Rate are the token bucket of server-initiated messages (notifications and
	// requests): Burst at once, Rate per second after that. The SDK queues such messages
	// without a bound, so fledge must not hand it more than this.
	Burst int
	Rate  float64
	// Pending bounds the ids of fledge's requests awaiting an answer.
	Pending int
	// Malformed is how many non-JSON-RPC lines are skipped before the session ends (servers
	// that print a banner to stdout still work).
	Malformed int
}

func (l connLimits) withDefaults() connLimits {
	if l.LineMax <= 0 {
		l.LineMax = 1 << 20
	}
	if l.Burst <= 0 {
		l.Burst = 1000
	}
	if l.Rate <= 0 {
		l.Rate = 200
	}
	if l.Pending <= 0 {
		l.Pending = 256
	}
	if l.Malformed <= 0 {
		l.Malformed = 100
	}
	return l
}

type msgOrErr struct {
	msg jsonrpc.Message
	err error
}

// lineConn is the MCP stdio framing (one JSON-RPC message per line) over a plugin's pipes,
// with fledge's bounds between the pipe and the SDK: lines are read by lines.Reader
// (an over-long line is never held), server-initiated messages go through a token bucket,
// responses must answer an id fledge sent. The MCP protocol itself is the SDK's.
type lineConn struct {
	r   io.ReadCloser
	w   io.WriteCloser
	lim connLimits

	incoming chan msgOrErr
	closed   chan struct{}
	once     sync.Once
	// serverEnded: the server closed its stdout before fledge closed the connection.
	serverEnded atomic.Bool

	writeMu sync.Mutex

	mu   sync.Mutex
	sent map[string]struct{}
	// cancelled are ids of requests fledge gave up on (notifications/cancelled sent): a late
	// answer to one is dropped, not a violation. Oldest first, at most Pending of them.
	cancelled []string
	tokens    float64
	last      time.Time
	fatal     error
	badSeen   int
	now       func() time.Time
}

func newLineConn(r io.ReadCloser, w io.WriteCloser, lim connLimits) *lineConn {
	lim = lim.withDefaults()
	c := &lineConn{
		r: r, w: w, lim: lim,
		incoming: make(chan msgOrErr),
		closed:   make(chan struct{}),
		sent:     map[string]struct{}{},
		tokens:   float64(lim.Burst),
		now:      time.Now,
	}
	c.last = c.now()
	go c.readLoop()
	return c
}

// Cause is why the connection ended on fledge's side (a bound crossed, a protocol
// violation), or nil.
func (c *lineConn) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

func (c *lineConn) setFatal(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fatal == nil {
		c.fatal = err
	}
	return c.fatal
}

func (c *lineConn) readLoop() {
	lr := lines.NewReader(c.r, c.lim.LineMax)
	for {
		line, n, err := lr.Next()
		var m msgOrErr
		switch {
		case err != nil:
			var le *lines.TooLongError
			if errors.As(err, &le) {
				m.err = c.setFatal(fmt.Errorf("%w: line %d is longer than line_max (%d bytes)", ErrLineTooLong, n, c.lim.LineMax))
			} else {
				m.err = err // EOF or a read error: the server is gone
				select {
				case <-c.closed: // fledge closed it
				default:
					c.serverEnded.Store(true)
				}
			}
		default:
			msg, derr := jsonrpc.DecodeMessage(line)
			if derr != nil {
				c.mu.Lock()
				c.badSeen++
				bad := c.badSeen
				c.mu.Unlock()
				if bad <= c.lim.Malformed {
					continue
				}
				m.err = c.setFatal(fmt.Errorf("%w: more than %d lines that are not JSON-RPC (last at line %d)", ErrMalformed, c.lim.Malformed, n))
				break
			}
			deliver, ferr := c.admit(msg)
			switch {
			case ferr != nil:
				m.err = c.setFatal(ferr)
			case !deliver:
				continue
			default:
				m.msg = msg
			}
		}
		select {
		case c.incoming <- m:
		case <-c.closed:
			return
		}
		if m.err != nil {
			return
		}
	}
}

// admit checks one message from the server against the bounds: an error ends the
// session; deliver false drops the message (a late answer to a cancelled request).
func (c *lineConn) admit(msg jsonrpc.Message) (deliver bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m := msg.(type) {
	case *jsonrpc.Response:
		k := idKey(m.ID)
		if _, ok := c.sent[k]; ok {
			delete(c.sent, k)
			return true, nil
		}
		for i, ck := range c.cancelled {
			if ck == k {
				c.cancelled = append(c.cancelled[:i], c.cancelled[i+1:]...)
				return false, nil
			}
		}
		return false, fmt.Errorf("%w (id %v)", ErrUnknownID, idText(m.ID))
	case *jsonrpc.Request:
		now := c.now()
		c.tokens += now.Sub(c.last).Seconds() * c.lim.Rate
		c.last = now
		if c.tokens > float64(c.lim.Burst) {
			c.tokens = float64(c.lim.Burst)
		}
		if c.tokens < 1 {
			return false, fmt.Errorf("%w: more than %d notifications/requests at once, or over %.0f a second (last: %q)", ErrFlood, c.lim.Burst, c.lim.Rate, clip.Bytes(m.Method, 80))
		}
		c.tokens--
	}
	return true, nil
}

func idKey(id jsonrpc.ID) string { return rawIDKey(id.Raw()) }

// rawIDKey is the key of an id as decoded JSON or as the SDK holds it.
func rawIDKey(raw any) string {
	switch v := raw.(type) {
	case int64:
		return fmt.Sprintf("n:%d", v)
	case float64:
		return fmt.Sprintf("n:%d", int64(v))
	case string:
		return "s:" + v
	}
	return fmt.Sprintf("?:%v", raw)
}

func idText(id jsonrpc.ID) string { return clip.Bytes(fmt.Sprint(id.Raw()), 64) }

// Read implements mcpsdk.Connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-c.incoming:
		return m.msg, m.err
	case <-c.closed:
		return nil, io.EOF
	}
}

// Write implements mcpsdk.Connection.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
		c.mu.Lock()
		if len(c.sent) >= c.lim.Pending {
			c.mu.Unlock()
			return fmt.Errorf("%w (%d)", ErrTooManyPending, c.lim.Pending)
		}
		c.sent[idKey(req.ID)] = struct{}{}
		c.mu.Unlock()
	} else if ok && req.Method == "notifications/cancelled" {
		c.forget(req.Params)
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	select {
	case <-c.closed:
		return mcpsdk.ErrConnectionClosed
	default:
	}
	_, err = c.w.Write(data)
	return err
}

// forget moves a request fledge cancelled from the in-flight ids to the cancelled ones,
// so it no longer counts against Pending and a late answer is dropped quietly.
func (c *lineConn) forget(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || p.RequestID == nil {
		return
	}
	k := rawIDKey(p.RequestID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sent[k]; !ok {
		return
	}
	delete(c.sent, k)
	if len(c.cancelled) >= c.lim.Pending {
		c.cancelled = c.cancelled[1:]
	}
	c.cancelled = append(c.cancelled, k)
}

// Close implements mcpsdk.Connection: the server sees EOF on its stdin.
func (c *lineConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		_ = c.w.Close()
		_ = c.r.Close()
	})
	return nil
}

// SessionID implements mcpsdk.Connection.
func (c *lineConn) SessionID() string { return "" }

// connTransport hands one lineConn to the SDK.
type connTransport struct{ c *lineConn }

func (t connTransport) Connect(context.Context) (mcpsdk.Connection, error) { return t.c, nil }
