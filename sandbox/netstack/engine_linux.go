// SPDX-License-Identifier: MIT

package netstack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/sandbox/kernel"
)

const nicID = 1

// Engine is one plugin session's network: a namespace whose only way out is this process.
type Engine struct {
	cfg    Config
	lim    egress.Limits
	loop   []uint16 // the granted host loopback ports
	root   *link    // the namespace Start made (nil: NewShared)
	linkMu sync.Mutex
	links  map[*link]bool
	fake   *fakePool
	own    map[netip.Addr]bool
	sem    chan struct{}
	dnsSem chan struct{} // DNS flows (UDP and TCP) answered at once
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	rec    egress.Limiter
	closed atomic.Bool

	cacheMu sync.Mutex
	cache   map[string]cached

	stats Stats

	trMu     sync.Mutex
	trs      map[transportKey]*http.Transport // intercept_linux.go
	tlsCache tls.ClientSessionCache
	upstream upPool // roundtrip_linux.go

	proxy *Proxy // the session's proxy (proxy_linux.go), nil without one
}

// Stats counts what the engine did (for tests and benchmarks).
type Stats struct {
	Allowed, Denied, DNS, DNSDenied, UDPDropped atomic.Int64
	Open                                        atomic.Int64
}

type cached struct {
	addrs []netip.Addr
	until time.Time
}

// link is one namespace the engine serves: its TUN device in a stack of its own, its
// loopback listeners.
type link struct {
	setup *nsSetup
	st    *stack.Stack
	once  sync.Once
}

// maxLinks bounds the namespaces one engine serves at once (runs of one plugin session).
const maxLinks = 256

// ErrTooManyLinks: a session already serves maxLinks namespaces.
var ErrTooManyLinks = errors.New("too many namespaces attached to one plugin session's network")

// Start builds the namespace and starts answering it (root: the plugin and its commands
// join that one namespace, NetNS).
func Start(cfg Config) (*Engine, error) {
	e, err := NewShared(cfg)
	if err != nil {
		return nil, err
	}
	s, err := newNamespace(e.loop)
	if err != nil {
		e.cancel()
		return nil, err
	}
	if e.root, err = e.attach(s); err != nil {
		e.cancel()
		return nil, err
	}
	return e, nil
}

// NewShared starts an engine with no namespace of its own: each run builds its namespace
// (Plan: an unprivileged run's stub, in the user namespace it was born in) and hands its
// fds over (Attach). Every namespace attached gets the same decisions, limits and records.
func NewShared(cfg Config) (*Engine, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("%w: no policy", ErrSetup)
	}
	lim := cfg.Limits.WithDefaults()
	loop, err := loopPorts(cfg.Policy)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, lim: lim, loop: loop, fake: newFakePool(lim.MaxNames), links: map[*link]bool{},
		sem: make(chan struct{}, lim.MaxConns), dnsSem: make(chan struct{}, maxDNSFlows), cache: map[string]cached{},
		rec: egress.Limiter{Burst: 20, Window: 10 * time.Second}}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.own = ownAddrs()
	return e, nil
}

// Plan is the namespace a run builds for this engine (the fds Attach takes).
func (e *Engine) Plan() *kernel.EgressNet { return plan(e.loop) }

// Attach serves a namespace a run built as Plan says; it takes fds (closed on failure too).
// detach ends that namespace's connections and closes its fds (the run's end).
func (e *Engine) Attach(fds *kernel.EgressFDs) (detach func(), err error) {
	s, err := fromFDs(fds)
	if err != nil {
		return nil, err
	}
	l, err := e.attach(s)
	if err != nil {
		return nil, err
	}
	return func() { e.detach(l) }, nil
}

func (e *Engine) attach(s *nsSetup) (*link, error) {
	e.linkMu.Lock()
	defer e.linkMu.Unlock()
	if e.closed.Load() {
		s.close()
		return nil, fmt.Errorf("%w: %w", ErrSetup, egress.ErrSessionClosed)
	}
	if len(e.links) >= maxLinks {
		s.close()
		return nil, fmt.Errorf("%w: %w (%d)", ErrSetup, ErrTooManyLinks, maxLinks)
	}
	l := &link{setup: s}
	var err error
	if l.st, err = e.startStack(s.tunFD); err != nil {
		s.close()
		return nil, err
	}
	e.links[l] = true
	for _, ln := range s.listeners {
		e.wg.Add(1)
		go e.serveLoopback(ln)
	}
	for _, u := range s.dnsUDP {
		e.wg.Add(1)
		go e.serveDNSUDP(u)
	}
	for _, ln := range s.dnsTCP {
		e.wg.Add(1)
		go e.serveDNSListener(ln)
	}
	return l, nil
}

// stop closes a link's listeners and its stack (every connection in it ends).
func (l *link) stop() {
	l.once.Do(func() {
		for _, ln := range l.setup.listeners {
			_ = ln.Close()
		}
		for _, ln := range l.setup.dnsTCP {
			_ = ln.Close()
		}
		for _, u := range l.setup.dnsUDP {
			_ = u.Close()
		}
		l.st.RemoveNIC(nicID)
		l.st.Close()
		l.st.Wait()
		l.setup.close()
	})
}

func (e *Engine) detach(l *link) {
	e.linkMu.Lock()
	delete(e.links, l)
	e.linkMu.Unlock()
	l.stop()
}

// NetNS is the namespace to run the plugin and its commands in (setns target); nil for an
// engine of NewShared.
func (e *Engine) NetNS() *os.File {
	if e.root == nil {
		return nil
	}
	return e.root.setup.ns
}

// Links is how many namespaces the engine serves now.
func (e *Engine) Links() int {
	e.linkMu.Lock()
	defer e.linkMu.Unlock()
	return len(e.links)
}

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Close ends every connection, stops the stacks and records what the limiter held back.
func (e *Engine) Close() error {
	e.linkMu.Lock()
	if !e.closed.CompareAndSwap(false, true) {
		e.linkMu.Unlock()
		return nil
	}
	links := e.links
	e.links = map[*link]bool{}
	proxy := e.proxy
	e.linkMu.Unlock()
	e.cancel()
	if proxy != nil {
		proxy.close()
	}
	for l := range links {
		l.stop()
	}
	e.wg.Wait()
	e.closeTransports()
	// Straight to the record: the limiter already counted these (through emit, Admit would
	// count them once more and drop them, losing the count).
	for _, ev := range e.rec.Flush() {
		if e.cfg.Record != nil {
			e.cfg.Record(ev)
		}
	}
	return nil
}

func (e *Engine) startStack(tunFD int) (*stack.Stack, error) {
	st := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	// The whole stack is configured before the TUN device is attached: the link's
	// dispatchers deliver packets from their own goroutines as soon as the NIC exists, and
	// the handlers and options they read must not change under them.
	sack := tcpip.TCPSACKEnabled(true)
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	// Buffers big enough for a bulk copy at loopback speed.
	mod := tcpip.TCPModerateReceiveBufferOption(true)
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &mod)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 8 << 20}
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 8 << 20}
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	// fledge closes first when the destination does, so its side holds TIME_WAIT; the
	// program's kernel reuses the port at once and a SYN into a long TIME_WAIT would stall.
	tw := tcpip.TCPTimeWaitTimeoutOption(time.Second)
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &tw)
	twr := tcpip.TCPTimeWaitReuseGlobal
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &twr)
	fwd := tcp.NewForwarder(st, 0, e.lim.MaxConns, e.handleTCP)
	st.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	ufwd := udp.NewForwarder(st, e.handleUDP)
	st.SetTransportProtocolHandler(udp.ProtocolNumber, ufwd.HandlePacket)

	// The TUN link of tunlink_linux.go: fdbased cannot use the device's virtio-net header.
	// It reads every packet with one readv in its own goroutine and hands it to the stack
	// inline (no queue to processor goroutines); its Attach(nil), which RemoveNIC calls
	// under the stack's lock, stops the reader without waiting for it.
	ep, err := newTUNLink(tunFD)
	if err != nil {
		return nil, fmt.Errorf("%w: link: %w", ErrSetup, err)
	}
	fail := func(err error) (*stack.Stack, error) {
		st.Close() // removes the NIC, which closes the link
		ep.Close() // the NIC was never made
		st.Wait()
		return nil, err
	}
	// Disabled until it is set up: no packet is handled before every destination address is
	// "ours" (the stack accepts any connection and fledge decides it).
	if terr := st.CreateNICWithOptions(nicID, ep, stack.NICOptions{Disabled: true}); terr != nil {
		return fail(fmt.Errorf("%w: nic: %s", ErrSetup, terr))
	}
	if terr := st.SetPromiscuousMode(nicID, true); terr != nil {
		return fail(fmt.Errorf("%w: %s", ErrSetup, terr))
	}
	if terr := st.SetSpoofing(nicID, true); terr != nil {
		return fail(fmt.Errorf("%w: %s", ErrSetup, terr))
	}
	st.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	if terr := st.EnableNIC(nicID); terr != nil {
		return fail(fmt.Errorf("%w: nic: %s", ErrSetup, terr))
	}
	return st, nil
}

func (e *Engine) emit(ev egress.Event) {
	if e.cfg.Record == nil {
		return
	}
	if !e.rec.Admit(&ev, time.Now()) {
		return
	}
	e.cfg.Record(ev)
}

func addrOf(a tcpip.Address) netip.Addr {
	if a.Len() == 4 {
		return netip.AddrFrom4(a.As4())
	}
	return netip.AddrFrom16(a.As16())
}

// --- DNS ---

func (e *Engine) handleUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	if id.LocalPort != 53 {
		e.stats.UDPDropped.Add(1)
		e.emit(egress.Event{Kind: egress.EventConnect, Proto: "udp", Address: addrOf(id.LocalAddress).String(),
			Port: id.LocalPort, Reason: egress.ReasonProtocol})
		return true // consumed: dropped
	}
	select {
	case e.dnsSem <- struct{}{}:
	default:
		e.emit(egress.Event{Kind: egress.EventDNS, Proto: "dns", Reason: egress.ReasonLimit})
		return true // dropped: the resolver retries
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		<-e.dnsSem
		return true
	}
	c := gonet.NewUDPConn(&wq, ep)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() { <-e.dnsSem }()
		defer c.Close()
		// One query per flow is what resolvers send; a few more are answered, bounded.
		buf := make([]byte, 4096)
		wait := 2 * time.Second
		for i := 0; i < 16; i++ {
			// A resolver sends its queries (A and AAAA) together: after the first, the flow
			// ends as soon as it falls quiet, so a lookup loop holds few flows at once.
			_ = c.SetReadDeadline(time.Now().Add(wait))
			wait = 50 * time.Millisecond
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if out := e.answer(buf[:n], 512); out != nil {
				_, _ = c.Write(out)
			}
		}
	}()
	return true
}

// serveDNSUDP answers the namespace's loopback nameserver (one datagram, one answer).
func (e *Engine) serveDNSUDP(u net.PacketConn) {
	defer e.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, from, err := u.ReadFrom(buf)
		if err != nil {
			return
		}
		if out := e.answer(buf[:n], 512); out != nil {
			_, _ = u.WriteTo(out, from)
		}
	}
}

// serveDNSListener answers DNS over TCP on the namespace's loopback nameserver.
func (e *Engine) serveDNSListener(l net.Listener) {
	defer e.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		select {
		case e.dnsSem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); defer func() { <-e.dnsSem }(); e.serveDNSTCP(c) }()
	}
}

// serveDNSTCP answers DNS over TCP (resolvers fall back to it for large answers).
func (e *Engine) serveDNSTCP(c net.Conn) {
	defer c.Close()
	for i := 0; i < 64; i++ {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		msg := make([]byte, int(l[0])<<8|int(l[1]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		out := e.answer(msg, 65535)
		if out == nil {
			return
		}
		if _, err := c.Write(append([]byte{byte(len(out) >> 8), byte(len(out))}, out...)); err != nil {
			return
		}
	}
}

// fakeTTL: how long a program may keep an answer; the address stays this session's for the
// name whatever the TTL (the pool never reuses an address).
const fakeTTL = 60

// maxDNSFlows bounds the DNS exchanges answered at once (a resolver sends one or two).
const maxDNSFlows = 256

// answer answers one DNS query. Only granted names get an address, and that address is one
// of the session's own (198.18.0.0/15): the connection to it tells fledge exactly which
// name the program meant, and the name is resolved on the host only when a connection is
// made, so a lookup alone never leaves the machine (no exfiltration by query names).
func (e *Engine) answer(q []byte, max int) []byte {
	req := new(dns.Msg)
	if err := req.Unpack(q); err != nil {
		return nil
	}
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		resp.Rcode = dns.RcodeFormatError
		return pack(resp)
	}
	qq := req.Question[0]
	qt := dns.TypeToString[qq.Qtype]
	name, ok := egress.CanonName(qq.Name)
	e.stats.DNS.Add(1)
	if !ok || !e.cfg.Policy.NameGranted(name) {
		e.stats.DNSDenied.Add(1)
		resp.Rcode = dns.RcodeNameError
		e.emit(egress.Event{Kind: egress.EventDNS, Proto: "dns", Host: shorten(name, qq.Name), QType: qt, Reason: egress.ReasonNotGranted})
		return pack(resp)
	}
	switch qq.Qtype {
	case dns.TypeA:
		a, ok := e.fake.assign(name)
		if !ok {
			resp.Rcode = dns.RcodeServerFailure
			e.emit(egress.Event{Kind: egress.EventDNS, Proto: "dns", Host: name, QType: qt, Reason: egress.ReasonLimit})
			return pack(resp)
		}
		resp.Answer = append(resp.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: fakeTTL},
			A:   a.AsSlice(),
		})
		e.emit(egress.Event{Kind: egress.EventDNS, Proto: "dns", Host: name, QType: qt, Address: a.String(), Allow: true, Reason: egress.ReasonGranted})
	default:
		// No IPv6 in the namespace; other types are not needed to connect. An empty answer
		// (NOERROR) makes resolvers use the A record.
		e.emit(egress.Event{Kind: egress.EventDNS, Proto: "dns", Host: name, QType: qt, Allow: true, Reason: egress.ReasonGranted})
	}
	_ = max
	return pack(resp)
}

// shorten keeps a refused name's record bounded: a query name built to exfiltrate data is
// recorded by its first 64 characters and its length.
func shorten(canon, raw string) string {
	n := canon
	if n == "" {
		n = raw
	}
	if len(n) > 64 {
		// Keep the domain last, so records of one domain are limited together.
		return n[:32] + "...(" + strconv.Itoa(len(n)) + " chars)." + lastLabels(n)
	}
	return n
}

func pack(m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	return b
}

// --- TCP ---

func (e *Engine) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := addrOf(id.LocalAddress)
	port := id.LocalPort
	if port == 53 {
		select {
		case e.dnsSem <- struct{}{}:
		default:
			e.refuseNow(egress.Event{Address: dst.String(), Port: port, Reason: egress.ReasonLimit}, func() { r.Complete(true) })
			return
		}
		if c := e.accept(r); c != nil {
			e.wg.Add(1)
			go func() { defer e.wg.Done(); defer func() { <-e.dnsSem }(); e.serveDNSTCP(c) }()
		} else {
			<-e.dnsSem
		}
		return
	}
	select {
	case e.sem <- struct{}{}:
	default:
		e.refuseNow(egress.Event{Address: dst.String(), Port: port, Reason: egress.ReasonLimit}, func() { r.Complete(true) })
		return
	}
	name, isFake := e.fake.name(dst)
	e.connect(connReq{name: name, byName: isFake, addr: dst, port: port,
		accept: func() net.Conn { return e.accept(r) },
		refuse: func() { r.Complete(true) }})
}

// connReq is one TCP connection a program asked for, however it asked: a connect in its
// namespace (a gVisor endpoint, answered by accept or a reset) or a request to the
// session's proxy (a CONNECT, a SOCKS5 CONNECT, a proxied HTTP request, answered in that
// protocol). Every way in is decided by connect, the one function that decides.
type connReq struct {
	name   string     // the name asked for (byName: "" when a session address has none)
	byName bool       // asked by name: a name fledge answered, or a proxy request naming one
	addr   netip.Addr // the address asked for when not by name
	port   uint16
	// proxied: the program's side is a plain HTTP proxy connection whose every request
	// must name this authority (host:port as asked); its proxy credential is not passed on.
	proxied string
	// accept tells the program its connection is made and returns its side (nil: gone).
	accept func() net.Conn
	// refuse tells the program its connection is refused (after the record).
	refuse func()
}

// loopback is the host's loopback address a granted localhost port is reached at.
var loopback = netip.MustParseAddr("127.0.0.1")

// connect decides one connection and, allowed, dials and serves it: the grant by name and
// port (the name resolved on the host, no SSRF by name), by address, or a granted host
// loopback port; a bound secret's or ruled destination read by fledge; every decision
// recorded before anything is dialled. The caller holds a slot of e.sem: connect frees it.
func (e *Engine) connect(r connReq) {
	release := func() { <-e.sem }
	name, port := r.name, r.port
	var target netip.Addr
	ev := egress.Event{Kind: egress.EventConnect, Proto: "tcp", Host: name, Port: port}
	checkName := r.byName && name != ""
	switch {
	case r.byName && name == "":
		ev.Address, ev.Reason = r.addr.String(), egress.ReasonNotGranted
	case r.byName:
		if !e.cfg.Policy.NameAndPort(name, port) {
			ev.Reason = egress.ReasonNotGranted
			break
		}
		addrs, err := e.resolve(name)
		if err != nil || len(addrs) == 0 {
			ev.Reason = egress.ReasonResolveFailed
			break
		}
		for _, a := range addrs {
			ok, why := e.cfg.Policy.DecideName(name, a, port, e.own[a])
			ev.Address, ev.Reason = a.String(), why
			if ok {
				target, ev.Allow = a, true
				break
			}
		}
	case r.addr == loopback:
		// A granted host loopback port, as the namespace's own loopback serves it: by its
		// address, or as "localhost".
		ev.Host, ev.Address, target = "localhost", loopback.String(), loopback
		if ev.Allow, ev.Reason = e.cfg.Policy.DecideAddr(loopback, port); !ev.Allow {
			ev.Allow, ev.Reason = e.cfg.Policy.DecideName("localhost", loopback, port, true)
		}
	default:
		ev.Address = r.addr.String()
		ev.Allow, ev.Reason = e.cfg.Policy.DecideAddr(r.addr, port)
		target = r.addr
	}
	if !ev.Allow {
		release()
		e.stats.Denied.Add(1)
		ev.Kind, ev.Proto = egress.EventConnect, "tcp"
		e.emit(ev) // recorded first: a program that exits on the refusal must not outrun it
		r.refuse()
		return
	}
	e.emit(ev) // the decision is recorded before anything is dialled
	start := time.Now()
	if checkName && e.cfg.Policy.Intercept(name, port) {
		// fledge reads this destination's requests: it dials per request, after reading.
		c := r.accept()
		if c == nil {
			release()
			return
		}
		e.stats.Allowed.Add(1)
		e.stats.Open.Add(1)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			defer release()
			defer e.stats.Open.Add(-1)
			e.intercept(c, ev, target, start)
		}()
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.lim.DialTimeout)
	up, err := e.dial(ctx, netip.AddrPortFrom(target, port))
	cancel()
	if err != nil {
		release()
		r.refuse()
		e.stats.Denied.Add(1)
		e.emit(egress.Event{Kind: egress.EventClose, Proto: "tcp", Host: ev.Host, Port: port, Address: target.String(),
			Reason: egress.ReasonDialFailed, Duration: time.Since(start)})
		return
	}
	c := r.accept()
	if c == nil {
		release()
		up.Close()
		return
	}
	e.stats.Allowed.Add(1)
	e.stats.Open.Add(1)
	// A goroutine of its own with a small stack: the caller's grew deep in the handshake
	// and the dial, and would hold that stack for as long as the connection lasts.
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer release()
		defer e.stats.Open.Add(-1)
		e.splice(c, up, ev, spliceMode{checkName: checkName || r.proxied != "", proxied: r.proxied}, start)
	}()
}

func (e *Engine) accept(r *tcp.ForwarderRequest) net.Conn {
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		return nil
	}
	r.Complete(false)
	ep.SocketOptions().SetKeepAlive(false)
	ep.SocketOptions().SetDelayOption(false) // no Nagle: the program's small writes go out at once
	return &stackConn{TCPConn: gonet.NewTCPConn(&wq, ep), ep: ep}
}

// stackConn is a program's connection in the namespace's stack; unlike gonet's, it can be
// ended with a reset (SetLinger, as net.TCPConn's).
type stackConn struct {
	*gonet.TCPConn
	ep tcpip.Endpoint
}

// SetLinger 0 makes Close send a reset and drop what is unsent (net.TCPConn.SetLinger).
func (c *stackConn) SetLinger(sec int) error {
	c.ep.SocketOptions().SetLinger(tcpip.LingerOption{Enabled: sec >= 0, Timeout: time.Duration(max(sec, 0)) * time.Second})
	return nil
}

// reset ends c with a reset (TCP RST) instead of a clean end: a transfer fledge cuts (the
// byte bound, the idle timeout, the other side's failure) must fail where the program or
// the destination can see it, never end like a whole stream. What is unsent is dropped.
func reset(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0)
	}
	_ = c.Close()
}

// refuseNow records a refusal made before any decision (a bound), then refuses.
func (e *Engine) refuseNow(ev egress.Event, refuse func()) {
	e.stats.Denied.Add(1)
	ev.Kind, ev.Proto, ev.Allow = egress.EventConnect, "tcp", false
	e.emit(ev)
	refuse()
}

func (e *Engine) dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	if e.cfg.Dial != nil {
		return e.cfg.Dial(ctx, "tcp", ap.String())
	}
	// No TCP keep-alive on the host side (four setsockopt calls per connection): the idle
	// timeout ends a quiet connection, as on the namespace side.
	d := net.Dialer{KeepAlive: -1}
	return d.DialContext(ctx, "tcp", ap.String())
}

// resolve looks name up on the host, cached for cacheTTL.
func (e *Engine) resolve(name string) ([]netip.Addr, error) {
	if name == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	now := time.Now()
	e.cacheMu.Lock()
	if c, ok := e.cache[name]; ok && now.Before(c.until) {
		e.cacheMu.Unlock()
		return c.addrs, nil
	}
	e.cacheMu.Unlock()
	ctx, cancel := context.WithTimeout(e.ctx, e.lim.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	var ttl time.Duration
	var err error
	if e.cfg.Resolve != nil {
		addrs, ttl, err = e.cfg.Resolve(ctx, name)
	} else {
		addrs, ttl, err = hostResolve(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	var v4 []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			v4 = append(v4, a)
		}
	}
	if ttl <= 0 {
		ttl = defaultCacheTTL
	}
	e.cacheMu.Lock()
	if len(e.cache) >= e.lim.MaxNames {
		clear(e.cache)
	}
	e.cache[name] = cached{addrs: v4, until: now.Add(ttl)}
	e.cacheMu.Unlock()
	return v4, nil
}

// splice copies both ways until both are done, an idle timeout or the byte bound, then
// records the connection's close.
// splice says how a spliced connection is read: checkName, message by message (flow);
// proxied, as a plain HTTP proxy connection.
type spliceMode struct {
	checkName bool
	// proxied: the authority every request of a plain HTTP proxy connection must name.
	proxied string
}

func (e *Engine) splice(c, up net.Conn, ev egress.Event, how spliceMode, start time.Time) {
	var in, out atomic.Int64
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	reason := egress.ReasonGranted
	var reasonMu sync.Mutex
	setReason := func(r string) {
		reasonMu.Lock()
		if reason == egress.ReasonGranted {
			reason = r
		}
		reasonMu.Unlock()
	}
	done := make(chan struct{})
	closeAll := func() { c.Close(); up.Close() }
	// resetAll ends a connection fledge cuts: both sides see a reset, not a clean end.
	resetAll := func() { reset(c); reset(up) }
	// Shutdown with the engine and the idle watchdog are callbacks, not goroutines of the
	// connection's own: nothing runs for them while bytes flow.
	stopCtx := context.AfterFunc(e.ctx, resetAll)
	idle := e.watchIdle(&last, done, func() { setReason("idle_timeout"); resetAll() })
	var wg sync.WaitGroup
	wg.Add(1)
	// One direction in a goroutine of its own, the other in this one.
	if how.checkName {
		f := newFlow(e, c, up, ev, &in, &out, &last, setReason, resetAll)
		f.proxied = how.proxied
		go func() { defer wg.Done(); f.requests() }()
		f.responses()
	} else {
		// A clean end is passed on as one (half-close); the byte bound or either side's
		// failure ends the whole connection with a reset.
		end := func(err error, dst net.Conn) {
			switch {
			case err == nil:
				halfClose(dst)
			case errors.Is(err, errLimit):
				setReason(egress.ReasonLimit)
				resetAll()
			default:
				setReason(egress.ReasonReset)
				resetAll()
			}
		}
		go func() { defer wg.Done(); end(e.copy(up, c, &out, &last), up) }() // program -> destination
		end(e.copy(c, up, &in, &last), c)                                    // destination -> program
	}
	wg.Wait()
	close(done)
	idle.Stop()
	stopCtx()
	closeAll()
	reasonMu.Lock()
	r := reason
	reasonMu.Unlock()
	if r == egress.ReasonGranted {
		r = "closed"
	}
	e.emit(egress.Event{Kind: egress.EventClose, Proto: "tcp", Host: ev.Host, Port: ev.Port, Address: ev.Address,
		Allow: true, Reason: r, BytesOut: out.Load(), BytesIn: in.Load(), Duration: time.Since(start)})
}

// watchIdle calls expire once nothing has moved (last) for the idle timeout, unless done
// is closed first. It is a timer that re-arms for the time left at each firing: no
// goroutine waits for it.
func (e *Engine) watchIdle(last *atomic.Int64, done <-chan struct{}, expire func()) *time.Timer {
	var t *time.Timer
	t = time.AfterFunc(e.lim.IdleTimeout, func() {
		select {
		case <-done:
			return
		default:
		}
		quiet := time.Since(time.Unix(0, last.Load()))
		if quiet >= e.lim.IdleTimeout {
			expire()
			return
		}
		t.Reset(e.lim.IdleTimeout - quiet)
	})
	return t
}

// copyBufs are the splice buffers, reused: a flood of short connections costs no garbage.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// A bulk transfer moves through a larger buffer: each read and write then carries up to
// 1 MiB instead of 64 KiB, so the copy goroutine, the stack's sender and the peer are woken
// a sixteenth as often (about a quarter less CPU for a download; docs/performance.md). A
// copy takes one only when a read filled its small buffer, gives it back as soon as a read
// does not fill the small one, and at most maxBulkBufs are out at once in the process, so
// fledge's memory stays bounded whatever the connections do.
const (
	bulkBufSize = 1 << 20
	maxBulkBufs = 8
)

var (
	bulkBufs  = sync.Pool{New: func() any { b := make([]byte, bulkBufSize); return &b }}
	bulkSlots = make(chan struct{}, maxBulkBufs)
	bulkTaken atomic.Int64 // how many times a copy took one (for tests)
)

// copyBuffer is one copy's buffer: its small pooled one, or a bulk one while reads fill
// the small one.
type copyBuffer struct{ small, big *[]byte }

func newCopyBuffer() *copyBuffer { return &copyBuffer{small: copyBufs.Get().(*[]byte)} }

// bytes is where the next read goes.
func (b *copyBuffer) bytes() []byte {
	if b.big != nil {
		return *b.big
	}
	return *b.small
}

// adapt follows the size of the last read, k bytes.
func (b *copyBuffer) adapt(k int) {
	switch {
	case b.big == nil && k == len(*b.small):
		select {
		case bulkSlots <- struct{}{}:
			bulkTaken.Add(1)
			b.big = bulkBufs.Get().(*[]byte)
		default: // every bulk buffer is taken: carry on with the small one
		}
	case b.big != nil && k < len(*b.small):
		b.dropBig()
	}
}

func (b *copyBuffer) dropBig() {
	if b.big != nil {
		bulkBufs.Put(b.big)
		b.big = nil
		<-bulkSlots
	}
}

// release gives both buffers back.
func (b *copyBuffer) release() {
	b.dropBig()
	copyBufs.Put(b.small)
}

// copyAll is io.Copy through a copyBuffer (never src's WriteTo or dst's ReadFrom: their
// buffers are small and their own).
func copyAll(dst io.Writer, src io.Reader) (int64, error) {
	b := newCopyBuffer()
	defer b.release()
	var total int64
	for {
		buf := b.bytes()
		k, err := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			total += int64(w)
			if werr != nil {
				return total, werr
			}
			if w != k {
				return total, io.ErrShortWrite
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		b.adapt(k)
	}
}

// copy moves bytes src -> dst until src's clean end (nil), the byte bound (errLimit) or
// either side's error.
func (e *Engine) copy(dst, src net.Conn, n, last *atomic.Int64) error {
	b := newCopyBuffer()
	defer b.release()
	for {
		buf := b.bytes()
		k, err := src.Read(buf)
		if k > 0 {
			if n.Add(int64(k)) > e.lim.MaxBytes {
				return errLimit
			}
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		b.adapt(k)
	}
}

func halfClose(c net.Conn) {
	type cw interface{ CloseWrite() error }
	if h, ok := c.(cw); ok {
		_ = h.CloseWrite()
		return
	}
	_ = c.Close()
}

// serveLoopback answers a granted host-loopback port in the namespace: the program's
// connect to 127.0.0.1:port there goes to the host's 127.0.0.1:port.
func (e *Engine) serveLoopback(l net.Listener) {
	defer e.wg.Done()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	lo := loopback
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		select {
		case e.sem <- struct{}{}:
		default:
			c.Close()
			e.stats.Denied.Add(1)
			e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Host: "localhost", Port: port, Address: lo.String(), Reason: egress.ReasonLimit})
			continue
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.connect(connReq{addr: lo, port: port, accept: func() net.Conn { return c }, refuse: func() { c.Close() }})
		}()
	}
}

// loopPorts lists the host loopback ports the grant opens (bounded: each is a listening
// socket in the namespace).
func loopPorts(p *egress.Policy) ([]uint16, error) {
	lo := netip.MustParseAddr("127.0.0.1")
	seen := map[uint16]bool{}
	var out []uint16
	for _, d := range p.Dests {
		if !(d.Host == "localhost" && !d.Wildcard) && !d.MatchesAddr(lo) {
			continue
		}
		for port := int(d.PortLo); port <= int(d.PortHi); port++ {
			if !seen[uint16(port)] {
				seen[uint16(port)] = true
				out = append(out, uint16(port))
			}
			if len(out) > maxLoopPorts {
				return nil, fmt.Errorf("%w: more than %d loopback ports granted", ErrSetup, maxLoopPorts)
			}
		}
	}
	return out, nil
}

const maxLoopPorts = 64

// ownAddrs are the host's own addresses: reaching them by a granted name is refused.
func ownAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	as, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

func lastLabels(n string) string {
	parts := strings.Split(n, ".")
	if len(parts) > 2 {
		parts = parts[len(parts)-2:]
	}
	return strings.Join(parts, ".")
}

// defaultCacheTTL is how long a host-side answer without a TTL is kept.
const defaultCacheTTL = 30 * time.Second
