// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// A program's HTTP/1.1 connection to a destination fledge reads carries one request at a
// time, so fledge answers it over one connection of its own to the host, used inline by
// the request's goroutine: request written, answer read, body streamed, all in that
// goroutine (net/http's Transport hands each request to a writer and a reader goroutine,
// three wake-ups a request that a kept-alive round trip feels). Idle connections to a host
// are kept for the session's next program connection. HTTP/2 connections of the program
// use the shared Transport.

// Bounds of the idle connections kept per destination.
const (
	maxIdleUpstream  = 8
	idleUpstreamTime = 60 * time.Second
)

// upConn is one of fledge's connections to a host.
type upConn struct {
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used bool // has carried a request (a failure on it may be a stale keep-alive)
	idle time.Time
}

// upPool keeps idle upstream connections per destination.
type upPool struct {
	mu   sync.Mutex
	idle map[transportKey][]*upConn
}

func (p *upPool) get(k transportKey) *upConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[k]
	if len(list) == 0 {
		return nil
	}
	for len(list) > 0 {
		uc := list[len(list)-1]
		list = list[:len(list)-1]
		if time.Since(uc.idle) < idleUpstreamTime {
			p.idle[k] = list
			return uc
		}
		uc.c.Close()
	}
	p.idle[k] = list
	return nil
}

func (p *upPool) put(k transportKey, uc *upConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = map[transportKey][]*upConn{}
	}
	if len(p.idle[k]) >= maxIdleUpstream || len(p.idle) >= maxTransports {
		uc.c.Close()
		return
	}
	uc.idle = time.Now()
	p.idle[k] = append(p.idle[k], uc)
}

func (p *upPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.idle {
		for _, uc := range l {
			uc.c.Close()
		}
	}
	p.idle = nil
}

// inlineRT is the round tripper of one program HTTP/1.1 connection.
type inlineRT struct {
	e      *Engine
	key    transportKey
	scheme string
}

func (rt *inlineRT) dial(ctx context.Context) (*upConn, error) {
	e := rt.e
	ctx, cancel := context.WithTimeout(ctx, e.lim.DialTimeout)
	defer cancel()
	c, err := e.dial(ctx, rt.key.up)
	if err != nil {
		return nil, err
	}
	if rt.scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: rt.key.name, RootCAs: e.cfg.RootCAs, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}, ClientSessionCache: e.sessionCache()})
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	return &upConn{c: c, br: bufio.NewReaderSize(c, 32<<10), bw: bufio.NewWriterSize(c, 32<<10)}, nil
}

func (rt *inlineRT) RoundTrip(req *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		uc := rt.e.upstream.get(rt.key)
		if uc == nil {
			var err error
			if uc, err = rt.dial(req.Context()); err != nil {
				return nil, err
			}
		}
		resp, err := rt.once(uc, req)
		if err == nil {
			return resp, nil
		}
		uc.c.Close()
		// A kept-alive connection the host closed while idle fails before any answer: a
		// request with no body to lose is sent again, once, on a new connection.
		if !uc.used || attempt > 0 || req.Body != nil && req.Body != http.NoBody || !errors.Is(err, errStale) {
			return nil, err
		}
	}
}

var errStale = errors.New("the kept-alive connection was closed by the host")

// errAnswerHead: the host's answer head did not fit fledge's read buffer (or never ended).
var errAnswerHead = errors.New("the destination's answer head is over 32 KiB or did not end")

func (rt *inlineRT) once(uc *upConn, req *http.Request) (*http.Response, error) {
	// The connection is used in this goroutine with no deadline of its own: a host that
	// never answers (or stops in the middle of an answer) would hold it, the program's
	// connection and the engine's Close. The program going away (the request's context) or
	// the engine closing ends the wait.
	kill := func() { _ = uc.c.SetDeadline(time.Unix(1, 0)) }
	stopReq := context.AfterFunc(req.Context(), kill)
	stopEngine := context.AfterFunc(rt.e.ctx, kill)
	// release reports whether the connection is still fit for another request.
	release := func() bool {
		a, b := stopReq(), stopEngine()
		return a && b
	}
	wasUsed := uc.used
	uc.used = true
	if err := req.Write(uc.bw); err != nil {
		release()
		return nil, err
	}
	if err := uc.bw.Flush(); err != nil {
		if release() && wasUsed {
			return nil, errStale
		}
		return nil, err
	}
	for {
		// An answer head is read only once it is whole in the connection's buffer: a host
		// sending an endless head does not grow fledge's memory.
		if !headBuffered(uc.br) {
			if release() && wasUsed && uc.br.Buffered() == 0 {
				return nil, errStale
			}
			return nil, errAnswerHead
		}
		resp, err := http.ReadResponse(uc.br, req)
		if err != nil {
			if release() && wasUsed && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && uc.br.Buffered() == 0 {
				return nil, errStale
			}
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			// The proxy splices an upgraded connection itself: the body is the connection
			// (never kept for another request, so the watch stays on it).
			resp.Body = &upgradedConn{uc: uc}
			return resp, nil
		case resp.StatusCode/100 == 1:
			continue // interim answers (100 Continue) are not passed on
		}
		keep := !resp.Close && !req.Close
		resp.Body = &returnBody{ReadCloser: resp.Body, done: func(clean bool) {
			if release() && clean && keep {
				rt.e.upstream.put(rt.key, uc)
			} else {
				uc.c.Close()
			}
		}}
		return resp, nil
	}
}

// returnBody gives the connection back once the body was read to its end (or closes it
// when the body was left unread).
type returnBody struct {
	io.ReadCloser
	once sync.Once
	done func(clean bool)
	eof  bool
}

func (b *returnBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *returnBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.done(b.eof) })
	return err
}

// upgradedConn is an upgraded upstream connection, read through its buffer.
type upgradedConn struct{ uc *upConn }

func (u *upgradedConn) Read(p []byte) (int, error)  { return u.uc.br.Read(p) }
func (u *upgradedConn) Write(p []byte) (int, error) { return u.uc.c.Write(p) }
func (u *upgradedConn) Close() error                { return u.uc.c.Close() }
