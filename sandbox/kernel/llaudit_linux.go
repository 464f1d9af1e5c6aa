// SPDX-License-Identifier: MIT

package kernel

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock's own denials, read from the kernel's audit. Landlock ABI 7+ logs each denial
// as an AUDIT_LANDLOCK_ACCESS record (domain=ID blockers=RIGHTS path="..."), and the first
// one of a domain also as an AUDIT_LANDLOCK_DOMAIN record (status=allocated ... comm="..."),
// carrying the name the thread that called landlock_restrict_self had then. fledge names
// that thread after the run (LandlockAuditName) right before it restricts itself, so the
// domain, and every later denial in it, maps to the run without asking the kernel anything
// else. Records only flow while the kernel's audit is enabled (the host's choice: fledge
// never changes it), and reading them takes CAP_AUDIT_READ (root): the socket joins the
// read-only multicast group AUDIT_NLGRP_READLOG, beside whatever audit daemon runs.

// Audit record types of Landlock (include/uapi/linux/audit.h, Linux 6.15).
const (
	auditLandlockAccess = 1423
	auditLandlockDomain = 1424
	auditNlgrpReadlog   = 1 // AUDIT_NLGRP_READLOG
)

// Bounds: one datagram is one record (the kernel caps a record well below 64 KiB); the
// runs watched at once and the domains one run may have named; the denials waiting for
// their domain record (it follows the first denial of a domain in the same event).
const (
	auditRecvBuf       = 64 << 10
	maxWatchedRuns     = 4096
	maxDomainsPerRun   = 64
	maxPendingDenials  = 256
	maxForeign         = 1024
	landlockNamePrefix = "fledge-"
)

// landlockWatch is the process-wide reader: one socket, one goroutine, started on the
// first watch that can use it and kept for the process's life.
type landlockWatch struct {
	mu      sync.Mutex
	runs    map[string]*watchedRun // by thread name
	domains map[string]*watchedRun // by Landlock domain ID
	foreign map[string]bool        // domains logged as no run's (bounded: maxForeign)
	pending []pendingDenial
	started bool
	ok      bool
}

type watchedRun struct {
	on      func(LandlockDenial)
	domains []string
	seen    atomic.Int64
}

type pendingDenial struct {
	serial, domain string
	d              LandlockDenial
}

var llWatch = newLandlockWatch()

func newLandlockWatch() *landlockWatch {
	return &landlockWatch{runs: map[string]*watchedRun{}, domains: map[string]*watchedRun{}, foreign: map[string]bool{}}
}

// LandlockAuditName returns a fresh thread name for one launch (at most 15 bytes, the
// kernel's comm size): the name its Landlock domain is logged under. It is random, not a
// count: every fledge process reads every Landlock record, so two processes counting from
// one would name their launches alike and each take the other's denials for its own; and
// a plugin that could predict another run's name could give a nested domain of its own
// that name (PR_SET_NAME, then landlock_restrict_self) to plant records in that run.
func LandlockAuditName() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return landlockNamePrefix + hex.EncodeToString(b[:])
}

// SetThreadName names the calling thread (PR_SET_NAME). The caller holds
// runtime.LockOSThread on a thread that dies after the launch.
func SetThreadName(name string) error {
	b, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
}

// WatchLandlock passes on every Landlock denial logged for the domain a thread named name
// creates. ok is false when this process cannot read the kernel's audit (not root, no
// audit netlink, Landlock below ABI 7); then nothing is ever passed on. seen reports how
// many denials were passed so far; stop ends the watch (later records are dropped).
func WatchLandlock(name string, on func(LandlockDenial)) (seen func() int64, stop func(), ok bool) {
	w := llWatch
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.started = true
		w.ok = w.start() == nil
	}
	if !w.ok || len(w.runs) >= maxWatchedRuns {
		return func() int64 { return 0 }, func() {}, false
	}
	r := &watchedRun{on: on}
	w.runs[name] = r
	return r.seen.Load, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.runs, name)
		for _, d := range r.domains {
			delete(w.domains, d)
		}
	}, true
}

// LandlockAuditReadable reports whether this process reads Landlock's denials from the
// kernel's audit (for doctor).
func LandlockAuditReadable() bool {
	w := llWatch
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.started = true
		w.ok = w.start() == nil
	}
	return w.ok
}

// AuditReadCapable reports whether this process holds CAP_AUDIT_READ, which joining the
// audit's read-only multicast group takes (doctor asks without joining it: joining is
// itself an audit event, AUDIT_EVENT_LISTENER).
func AuditReadCapable() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_AUDIT_READ/32].Effective&(1<<(unix.CAP_AUDIT_READ%32)) != 0
}

func (w *landlockWatch) start() error {
	if LandlockABI() < 7 {
		return fmt.Errorf("landlock abi below 7")
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return err
	}
	// Joining the group needs CAP_AUDIT_READ; the kernel refuses the bind otherwise.
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (auditNlgrpReadlog - 1)}); err != nil {
		unix.Close(fd)
		return err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	go w.read(fd)
	return nil
}

func (w *landlockWatch) read(fd int) {
	buf := make([]byte, auditRecvBuf)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR || err == unix.ENOBUFS {
			continue // ENOBUFS: records were lost to a full socket; the rest still come
		}
		if err != nil {
			return
		}
		if n < unix.NLMSG_HDRLEN {
			continue
		}
		typ := binary.NativeEndian.Uint16(buf[4:6])
		if typ != auditLandlockAccess && typ != auditLandlockDomain {
			continue
		}
		// The kernel's length field of audit records is not always right; the datagram is.
		w.handle(typ, string(buf[unix.NLMSG_HDRLEN:n]))
	}
}

// handle takes one Landlock record: "audit(SEC.MS:SERIAL): key=value ...".
func (w *landlockWatch) handle(typ uint16, rec string) {
	serial, body, ok := auditHeader(rec)
	if !ok {
		return
	}
	f := auditFields(body)
	domain := f["domain"]
	if domain == "" {
		return
	}
	var deliver []func()
	w.mu.Lock()
	switch typ {
	case auditLandlockAccess:
		d := LandlockDenial{Blockers: f["blockers"], Path: f["path"]}
		var obj []string
		for _, k := range []string{"dev", "ino", "name", "daddr", "dest", "saddr", "src", "opid", "ocomm"} {
			if v, ok := f[k]; ok {
				obj = append(obj, k+"="+v)
			}
		}
		d.Object = strings.Join(obj, " ")
		if r := w.domains[domain]; r != nil {
			deliver = append(deliver, r.pass(d))
		} else if !w.foreign[domain] {
			// Its domain record, if it is one of ours, comes next in the same event.
			if len(w.pending) >= maxPendingDenials {
				w.pending = w.pending[1:]
			}
			w.pending = append(w.pending, pendingDenial{serial: serial, domain: domain, d: d})
		}
	case auditLandlockDomain:
		switch f["status"] {
		case "allocated":
			r := w.runs[f["comm"]]
			if r == nil || len(r.domains) >= maxDomainsPerRun {
				if len(w.foreign) >= maxForeign {
					clear(w.foreign) // forgotten ones are held and pushed out again
				}
				w.foreign[domain] = true
				break
			}
			r.domains = append(r.domains, domain)
			w.domains[domain] = r
			for _, p := range w.pending {
				if p.domain == domain {
					deliver = append(deliver, r.pass(p.d))
				}
			}
		case "deallocated":
			delete(w.domains, domain)
			delete(w.foreign, domain)
		}
		// The domain's held denials are settled (passed on, or no run's). Others wait for
		// theirs, within maxPendingDenials: one whose domain was logged before fledge
		// watched it never gets one and is pushed out.
		kept := w.pending[:0]
		for _, p := range w.pending {
			if p.domain != domain {
				kept = append(kept, p)
			}
		}
		w.pending = kept
	}
	w.mu.Unlock()
	for _, fn := range deliver {
		fn()
	}
}

func (r *watchedRun) pass(d LandlockDenial) func() {
	r.seen.Add(1)
	return func() { r.on(d) }
}

// auditHeader splits "audit(1795722168.429:45): body" into the serial and the body.
func auditHeader(rec string) (serial, body string, ok bool) {
	if !strings.HasPrefix(rec, "audit(") {
		return "", "", false
	}
	end := strings.Index(rec, "): ")
	if end < 0 {
		return "", "", false
	}
	_, serial, ok = strings.Cut(rec[len("audit("):end], ":")
	return serial, rec[end+3:], ok
}

// auditFields parses key=value pairs; a value is "quoted" (no quote inside: the kernel
// writes any string holding a quote, a space or a control byte as hex instead) or bare,
// hex-encoded untrusted strings decoded.
func auditFields(s string) map[string]string {
	out := map[string]string{}
	for len(s) > 0 && len(out) < 64 {
		s = strings.TrimLeft(s, " ")
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			break
		}
		k := s[:eq]
		s = s[eq+1:]
		var v string
		if strings.HasPrefix(s, `"`) {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				break
			}
			v, s = s[1:1+end], s[2+end:]
		} else {
			end := strings.IndexByte(s, ' ')
			if end < 0 {
				end = len(s)
			}
			v, s = s[:end], s[end:]
			if k == "path" || k == "comm" || k == "name" || k == "exe" {
				v = unhex(v)
			}
		}
		out[k] = v
	}
	return out
}

// unhex decodes an untrusted string the kernel logged as hex (audit_log_n_untrustedstring).
func unhex(v string) string {
	if v == "(null)" || len(v)%2 != 0 {
		return v
	}
	b := make([]byte, 0, len(v)/2)
	for i := 0; i < len(v); i += 2 {
		x, err := strconv.ParseUint(v[i:i+2], 16, 8)
		if err != nil {
			return v
		}
		b = append(b, byte(x))
	}
	return string(b)
}
