// SPDX-License-Identifier: MIT

package egress

import (
	"strings"
	"sync"
	"time"
)

// Event kinds (audit event names).
const (
	EventConnect = "net_connect" // a decision on one outgoing connection
	EventClose   = "net_close"   // an allowed connection ended: bytes each way, duration
	EventDNS     = "net_dns"     // a name lookup answered (or refused) by fledge
	EventHTTP    = "net_http"    // one request fledge read (terminated TLS or plain HTTP it must read)
)

// Event is one network record. The host turns it into an audit record.
type Event struct {
	Kind     string
	Host     string // the name the program looked up (or sent as SNI/Host); "" for an address
	Port     uint16
	Address  string // the address the host side dialled or the program connected to
	Proto    string // "tcp", "udp", "dns"
	Allow    bool
	Reason   string
	QType    string // net_dns: A, AAAA, ...
	BytesOut int64  // net_close: program -> destination
	BytesIn  int64  // net_close: destination -> program
	Duration time.Duration
	// net_http: the request's method, its path without query values, the destination's
	// status (0 when none came), and the names of the secrets fledge put into it.
	Method  string
	Path    string
	Status  int
	Secrets []string
	// Suppressed counts records like this one that the limiter left out since the last one
	// written (a tight retry loop gives one record per window, not one per attempt).
	Suppressed int
}

// Limiter keeps a flood of identical records (the same kind, decision, host and port) to
// at most Burst per Window; the rest are counted and the count rides on the next record
// let through, or is returned by Flush.
type Limiter struct {
	Burst  int
	Window time.Duration

	mu   sync.Mutex
	keys map[limKey]*limState
}

type limKey struct {
	kind, host, addr string
	port             uint16
	allow            bool
}

type limState struct {
	start      time.Time
	n          int
	suppressed int
	last       Event
}

// maxLimiterKeys bounds the limiter's own memory: past it, old windows are dropped.
const maxLimiterKeys = 4096

// Admit reports whether ev should be recorded now, filling ev.Suppressed.
func (l *Limiter) Admit(ev *Event, now time.Time) bool {
	if ev.Kind == EventClose {
		return true // one per allowed connection, bounded by the connection limit
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[limKey]*limState{}
	}
	k := limKey{ev.Kind, ev.Host, ev.Address, ev.Port, ev.Allow}
	if ev.Kind == EventDNS && !ev.Allow {
		// Refused lookups of many names under one domain (data in the labels) share a key.
		k.host = domainOf(ev.Host)
	}
	st := l.keys[k]
	if st == nil || now.Sub(st.start) >= l.Window {
		if st == nil && len(l.keys) >= maxLimiterKeys {
			for kk, s := range l.keys {
				if now.Sub(s.start) >= l.Window && s.suppressed == 0 {
					delete(l.keys, kk)
				}
			}
			if len(l.keys) >= maxLimiterKeys {
				// Every key is busy: count this one against a shared overflow key.
				k = limKey{kind: ev.Kind, host: "(many)"}
				if st = l.keys[k]; st == nil {
					st = &limState{start: now}
					l.keys[k] = st
				}
				st.suppressed++
				return false
			}
		}
		carried := 0
		if st != nil {
			carried = st.suppressed
		}
		st = &limState{start: now}
		l.keys[k] = st
		ev.Suppressed = carried
	}
	if st.n >= l.Burst {
		st.suppressed++
		st.last = *ev
		return false
	}
	st.n++
	if ev.Suppressed == 0 {
		ev.Suppressed, st.suppressed = st.suppressed, 0
	}
	return true
}

// Flush returns one event per key that still has suppressed records, carrying the count.
func (l *Limiter) Flush() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for k, st := range l.keys {
		if st.suppressed > 0 {
			ev := st.last
			if ev.Kind == "" {
				ev = Event{Kind: k.kind, Host: k.host, Port: k.port, Address: k.addr, Allow: k.allow, Reason: ReasonLimit}
			}
			ev.Suppressed = st.suppressed
			out = append(out, ev)
			st.suppressed = 0
		}
	}
	return out
}

// domainOf is the last two labels of a name (its registered domain, near enough).
func domainOf(name string) string {
	name = strings.TrimSuffix(name, ".")
	i := strings.LastIndex(name, ".")
	if i <= 0 {
		return name
	}
	if j := strings.LastIndex(name[:i], "."); j >= 0 {
		return name[j+1:]
	}
	return name
}
