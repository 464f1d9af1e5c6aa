// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// The session's proxy is network by destination where fledge can make no network
// namespace (an ordinary user on a host without user namespaces). The plugin and its
// commands may connect to one TCP port only (Landlock), this proxy's, on the host's
// loopback; the proxy variables point their programs at it. It speaks HTTP (CONNECT, and
// plain requests in absolute form) and SOCKS5 (CONNECT, the name resolved by fledge) on
// the one port, and every connection it is asked for goes to connect, the function that
// decides the namespace's connections: the same grants, SSRF guard, bound secrets, HTTP
// rules, per-request checks and records. The port is on the host's loopback, where any
// local program can reach it, so every connection must carry the session's credential
// (the userinfo of the proxy URL in the variables; Proxy-Authorization Basic, or SOCKS5
// username/password), compared in constant time; without it nothing is decided or dialled.

// ProxyUser is the user name of the proxy credential (the password is the secret).
const ProxyUser = "fledge"

// ReasonProxyAuth: a connection to the session's proxy without the session's credential.
const ReasonProxyAuth = "proxy_auth"

// maxProxyPending bounds the proxy connections not yet past their credential and request.
const maxProxyPending = 64

// Proxy is a session's proxy (StartProxy).
type Proxy struct {
	e       *Engine
	ln      net.Listener
	port    uint16
	secret  string
	basic   string // the Proxy-Authorization value
	pending chan struct{}
	uid     uint32 // this process's uid: the session's processes run as it
}

// ErrProxy: the session's proxy could not start.
var ErrProxy = errors.New("session proxy")

// StartProxy starts the session's proxy on a loopback port of its own; Close of the engine
// ends it.
func (e *Engine) StartProxy() (*Proxy, error) {
	e.linkMu.Lock()
	defer e.linkMu.Unlock()
	if e.closed.Load() {
		return nil, fmt.Errorf("%w: %w", ErrProxy, egress.ErrSessionClosed)
	}
	if e.proxy != nil {
		return e.proxy, nil
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("%w: credential: %w", ErrProxy, err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProxy, err)
	}
	p := &Proxy{e: e, ln: ln, port: uint16(ln.Addr().(*net.TCPAddr).Port), secret: hex.EncodeToString(b[:]),
		pending: make(chan struct{}, maxProxyPending), uid: uint32(os.Getuid())}
	p.basic = "Basic " + base64.StdEncoding.EncodeToString([]byte(ProxyUser+":"+p.secret))
	e.proxy = p
	e.wg.Add(1)
	go p.serve()
	return p, nil
}

// Port is the proxy's loopback port (the one port a run may connect to).
func (p *Proxy) Port() uint16 { return p.port }

// URL is the proxy's URL with its credential (scheme "http" or "socks5h").
func (p *Proxy) URL(scheme string) string {
	return scheme + "://" + ProxyUser + ":" + p.secret + "@127.0.0.1:" + strconv.Itoa(int(p.port))
}

// Env are the variables that point programs at the proxy, in both spellings. NO_PROXY is
// set empty: a user's own NO_PROXY (localhost, an intranet) would send programs straight
// to destinations they cannot reach. NODE_USE_ENV_PROXY asks Node (22.21, 24.5 and later)
// to honour them in fetch and http.
func (p *Proxy) Env() []string {
	h, s := p.URL("http"), p.URL("socks5h")
	var out []string
	for _, kv := range [][2]string{{"HTTP_PROXY", h}, {"HTTPS_PROXY", h}, {"ALL_PROXY", s}, {"NO_PROXY", ""}} {
		out = append(out, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return append(out, "NODE_USE_ENV_PROXY=1")
}

func (p *Proxy) close() { _ = p.ln.Close() }

func (p *Proxy) serve() {
	defer p.e.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of fds: the next Accept may succeed
			continue
		}
		if uid, ok := peerUID(c); ok && uid != p.uid {
			// Another user's program: refused before it can hold a slot or try a
			// credential (the credential alone would refuse it; this keeps other users
			// from filling the slots of connections still to show theirs).
			c.Close()
			p.authFailed()
			continue
		}
		select {
		case p.pending <- struct{}{}:
		default:
			c.Close()
			p.e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Reason: egress.ReasonLimit})
			continue
		}
		p.e.wg.Add(1)
		go func() {
			defer p.e.wg.Done()
			p.handle(c)
		}()
	}
}

// handle reads one proxy connection's credential and request, then hands it to connect.
func (p *Proxy) handle(c net.Conn) {
	held := true
	done := func() {
		if held {
			held = false
			<-p.pending
		}
	}
	defer done()
	// Until it is handed to connect (whose connections end with the engine), the
	// connection ends with the engine here.
	stop := context.AfterFunc(p.e.ctx, func() { c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(headTimeout))
	br := bufio.NewReaderSize(c, flowBuf)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	var r connReq
	var ok bool
	if first[0] == 5 {
		r, ok = p.socks(c, br)
	} else {
		r, ok = p.http(c, br)
	}
	if !ok {
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	done()
	select {
	case p.e.sem <- struct{}{}:
	default:
		p.e.refuseNow(egress.Event{Host: r.name, Address: addrString(r.addr), Port: r.port, Reason: egress.ReasonLimit}, r.refuse)
		return
	}
	p.e.connect(r)
}

func addrString(a netip.Addr) string {
	if a.IsValid() {
		return a.String()
	}
	return ""
}

// authFailed records a connection without the session's credential.
func (p *Proxy) authFailed() {
	p.e.stats.Denied.Add(1)
	p.e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Address: "127.0.0.1", Port: p.port, Reason: ReasonProxyAuth})
}

// target makes the request for host:port as a proxy client named it.
func target(host string, addr netip.Addr, port uint16) connReq {
	if addr.IsValid() {
		return connReq{addr: addr.Unmap(), port: port}
	}
	return connReq{name: host, byName: true, port: port}
}

// http reads an HTTP proxy request: CONNECT host:port, or a request in absolute form.
func (p *Proxy) http(c net.Conn, br *bufio.Reader) (connReq, bool) {
	req, err := readRequestHead(c, br)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		return connReq{}, false
	}
	if subtle.ConstantTimeCompare([]byte(req.Field("Proxy-Authorization")), []byte(p.basic)) != 1 {
		p.authFailed()
		_, _ = io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"fledge\"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		return connReq{}, false
	}
	switch req.Form {
	case egress.AuthorityForm:
		_, _ = br.Discard(req.Consumed)
		r := target(req.Host, req.Addr, req.Port)
		r.accept = func() net.Conn {
			if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
				c.Close()
				return nil
			}
			return bufferedConn(c, br)
		}
		r.refuse = func() { refuseHTTP(c) }
		return r, true
	case egress.AbsoluteForm:
		if !strings.HasPrefix(strings.ToLower(req.Target), "http://") {
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			return connReq{}, false
		}
		port := req.Port
		if port == 0 {
			port = 80
		}
		r := target(req.Host, req.Addr, port)
		// The request stays in br: the connection's flow reads it, and every later one,
		// as it reads a program's own.
		r.proxied = req.Host + ":" + itoa(port)
		r.accept = func() net.Conn { return bufferedConn(c, br) }
		r.refuse = func() { refuseHTTP(c) }
		return r, true
	default:
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		return connReq{}, false
	}
}

// refuseHTTP answers a refused proxy request (the record is written already).
func refuseHTTP(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(headTimeout))
	_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 44\r\n\r\nfledge: destination refused by the grant.\r\n\r\n")
	c.Close()
}

// SOCKS5 (RFC 1928) with username/password (RFC 1929).
const (
	socksVersion    = 5
	socksUserPass   = 2
	socksNoMethod   = 0xff
	socksConnect    = 1
	socksIPv4       = 1
	socksName       = 3
	socksIPv6       = 4
	socksOK         = 0
	socksNotAllowed = 2
	socksCmdUnsupp  = 7
	socksAddrUnsupp = 8
)

// socks reads a SOCKS5 greeting, the credential and a CONNECT.
func (p *Proxy) socks(c net.Conn, br *bufio.Reader) (connReq, bool) {
	if !p.socksAuth(c, br) {
		return connReq{}, false
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return connReq{}, false
	}
	reply := func(code byte) { _, _ = c.Write([]byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0}) }
	host, addr, ok := p.socksAddress(br, req[3], reply)
	if !ok {
		return connReq{}, false
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return connReq{}, false
	}
	if req[1] != socksConnect {
		reply(socksCmdUnsupp) // BIND and UDP ASSOCIATE: no listening, no UDP
		return connReq{}, false
	}
	r := target(host, addr, binary.BigEndian.Uint16(pb[:]))
	r.accept = func() net.Conn {
		reply(socksOK)
		return bufferedConn(c, br)
	}
	r.refuse = func() {
		reply(socksNotAllowed)
		c.Close()
	}
	return r, true
}

// socksAuth negotiates the method (username/password only) and checks the session's
// credentials (RFC 1929); false when the client may go no further.
func (p *Proxy) socksAuth(c net.Conn, br *bufio.Reader) bool {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return false
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return false
	}
	if !strings.ContainsRune(string(methods), socksUserPass) {
		p.authFailed()
		_, _ = c.Write([]byte{socksVersion, socksNoMethod})
		return false
	}
	if _, err := c.Write([]byte{socksVersion, socksUserPass}); err != nil {
		return false
	}
	// RFC 1929: VER(1) ULEN UNAME PLEN PASSWD.
	var v [2]byte
	if _, err := io.ReadFull(br, v[:]); err != nil || v[0] != 1 {
		return false
	}
	user := make([]byte, v[1])
	if _, err := io.ReadFull(br, user); err != nil {
		return false
	}
	if _, err := io.ReadFull(br, v[:1]); err != nil {
		return false
	}
	pass := make([]byte, v[0])
	if _, err := io.ReadFull(br, pass); err != nil {
		return false
	}
	got := append(append(user, ':'), pass...)
	if subtle.ConstantTimeCompare(got, []byte(ProxyUser+":"+p.secret)) != 1 {
		p.authFailed()
		_, _ = c.Write([]byte{1, 1})
		return false
	}
	if _, err := c.Write([]byte{1, 0}); err != nil {
		return false
	}
	return true
}

// socksAddress reads a request's destination of address type atyp: an IP address, or a
// name (a name that is an IP address counts as the address). A name that is no host name
// is refused and recorded, an unknown type refused.
func (p *Proxy) socksAddress(br *bufio.Reader, atyp byte, reply func(byte)) (string, netip.Addr, bool) {
	var host string
	var addr netip.Addr
	switch atyp {
	case socksIPv4:
		var a [4]byte
		if _, err := io.ReadFull(br, a[:]); err != nil {
			return "", netip.Addr{}, false
		}
		addr = netip.AddrFrom4(a)
	case socksIPv6:
		var a [16]byte
		if _, err := io.ReadFull(br, a[:]); err != nil {
			return "", netip.Addr{}, false
		}
		addr = netip.AddrFrom16(a)
	case socksName:
		var n [1]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			return "", netip.Addr{}, false
		}
		raw := make([]byte, n[0])
		if _, err := io.ReadFull(br, raw); err != nil {
			return "", netip.Addr{}, false
		}
		if a, err := netip.ParseAddr(string(raw)); err == nil {
			addr = a
		} else if cn, ok := egress.CanonName(string(raw)); ok {
			host = cn
		} else {
			p.e.stats.Denied.Add(1)
			p.e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Host: shorten("", string(raw)), Reason: egress.ReasonBadRequest})
			reply(socksNotAllowed)
			return "", netip.Addr{}, false
		}
	default:
		reply(socksAddrUnsupp)
		return "", netip.Addr{}, false
	}
	return host, addr, true
}

// readConn reads first what the proxy's reader holds, then the connection.
type readConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *readConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// CloseWrite half-closes the program's side (the splice's end of one direction).
func (c *readConn) CloseWrite() error {
	if h, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return h.CloseWrite()
	}
	return c.Conn.Close()
}

// SetLinger passes on to the program's side (a cut transfer resets it, as net.TCPConn's).
func (c *readConn) SetLinger(sec int) error {
	if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return l.SetLinger(sec)
	}
	return nil
}

func bufferedConn(c net.Conn, br *bufio.Reader) net.Conn {
	if br.Buffered() == 0 {
		return c
	}
	return &readConn{Conn: c, br: br}
}

// peerUID is the uid that owns the other end of c, a connection from this host's loopback,
// as the kernel's socket tables say; false when it cannot tell. The tables of this thread's
// network namespace (thread-self): the listener's, which /proc/net, the main thread's, need
// not be.
func peerUID(c net.Conn) (uint32, bool) {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, false
	}
	want := fmt.Sprintf(":%04X", ra.Port)  // the peer's own port, its local address
	peer := fmt.Sprintf(":%04X ", la.Port) // its remote: the proxy's port
	for _, table := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(io.LimitReader(f, maxSocketTable))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 8 || !strings.HasSuffix(fields[1], want) || !strings.HasSuffix(fields[2]+" ", peer) {
				continue
			}
			uid, err := strconv.ParseUint(fields[7], 10, 32)
			f.Close()
			return uint32(uid), err == nil
		}
		f.Close()
	}
	return 0, false
}

// maxSocketTable bounds what is read of one socket table.
const maxSocketTable = 64 << 20
