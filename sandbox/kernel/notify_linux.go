// SPDX-License-Identifier: MIT

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kernel refusals as records. With Filter.Notify the deny-list's refusals are answered by
// a seccomp user-notification listener the host serves (ServeNotify) instead of by the
// filter itself: the host learns which process called what, answers with the very errno
// the filter would have, and records it. Only a refused call ever reaches the listener, so
// a run that is refused nothing costs nothing more than the listener's hand-over.
//
// With Filter.Trace the path and connect syscalls (traceCalls) reach the listener too. The
// host reads the path (or address) the call names from the caller's memory, decides whether
// it lies outside the run's grants, records it if so, and always answers CONTINUE: trace
// mode observes, it never decides. The read is bounded (a path of at most PATH_MAX bytes,
// an address of at most 128) and checked afterwards with SECCOMP_IOCTL_NOTIF_ID_VALID (the
// caller could have died and its pid been reused). Another thread of the caller can still
// rewrite the memory between our read and the kernel's own: what is recorded is what the
// call named when we looked, and the kernel's decision is made without us either way.

// execve and execveat are not traced. The thread launcher's child makes its first execve
// between Go's vfork and the exec, while the launching thread of the host waits in raw
// vfork: a stop-the-world of the host then waits for that thread, which waits for the
// child, which would wait for the host's listener, stopped too. A program run outside the
// grants is still seen: shells and execvp look each candidate up (stat, access) first, and
// the dynamic loader opens it.

// accessKind is what a traced call does with the path it names.
type accessKind int

const (
	accessOpen    accessKind = iota // open: read or write by its flags
	accessWrite                     // create, remove
	accessStat                      // metadata only
	accessExec                      // execute
	accessConnect                   // connect(2): a destination, no path
)

// traceCall is one syscall Filter.Trace observes; dirArg/pathArg/flagsArg are argument
// indexes (-1: none).
type traceCall struct {
	name                      string
	nr                        int
	dirArg, pathArg, flagsArg int
	access                    accessKind
}

// Bounds on what one notification makes the host read.
const (
	maxTracePath = unix.PathMax
	maxTraceAddr = 128
)

var (
	verdictOnce sync.Once
	verdictTab  map[int]rule
	verdictTCP  map[int]rule // with the TCPOnly rows (Filter.TCPOnly)
	traceTab    map[int]traceCall
)

// verdictTable is every rule by syscall number, with the optional rows on (a call the
// filter did not refuse never reaches the listener for them).
func verdictTable() (map[int]rule, map[int]traceCall) {
	verdictOnce.Do(func() {
		verdictTab = map[int]rule{}
		for _, r := range denyTable(Filter{DenyUnix: true}) {
			verdictTab[r.nr] = r
		}
		verdictTCP = map[int]rule{}
		for _, r := range denyTable(Filter{DenyUnix: true, TCPOnly: true}) {
			verdictTCP[r.nr] = r
		}
		traceTab = map[int]traceCall{}
		for _, t := range traceCalls {
			traceTab[t.nr] = t
		}
	})
	return verdictTab, traceTab
}

// matches evaluates a rule on a call's arguments exactly as its filter block does.
func (r rule) matches(args [6]uint64) bool {
	a := func(i int) uint32 { return uint32(args[i]) }
	switch r.check {
	case anyBit:
		return a(0)&r.values[0] != 0
	case anyBitArg:
		return a(r.modeArg)&r.values[0] != 0
	case oneOf:
		return slices.Contains(r.values, a(0))
	case socketFamily:
		if a(0) == unix.AF_NETLINK && slices.Contains(r.values, a(0)) {
			return !slices.Contains(netlinkProtocols, a(2))
		}
		if (a(0) == unix.AF_INET || a(0) == unix.AF_INET6) && r.tcpOnly {
			return a(1)&sockTypeMask != unix.SOCK_STREAM || (a(2) != 0 && a(2) != unix.IPPROTO_TCP)
		}
		return !slices.Contains(r.values, a(0))
	case noneOf:
		return !slices.Contains(r.values, a(0))
	case setIDMode:
		if r.flagsArg >= 0 && a(r.flagsArg)&unix.O_CREAT == 0 {
			return false
		}
		return a(r.modeArg)&setIDBits != 0
	case socketPair:
		if slices.Contains(r.values, a(0)) {
			return false
		}
		t := a(1) & sockTypeMask
		return a(0) != unix.AF_UNIX || (t != unix.SOCK_STREAM && t != unix.SOCK_SEQPACKET)
	}
	return true // always, enosysAlways, denyClone3
}

// verdict is the answer to a notified call: the errno of the row that refuses it, or 0
// (continue: a traced call no row refuses).
func verdict(nr int, args [6]uint64) (rule, unix.Errno) { return verdictFor(false, nr, args) }

// verdictFor is verdict for a filter with or without Filter.TCPOnly.
func verdictFor(tcpOnly bool, nr int, args [6]uint64) (rule, unix.Errno) {
	rules, _ := verdictTable()
	if tcpOnly {
		rules = verdictTCP
	}
	if r, ok := rules[nr]; ok && r.matches(args) {
		return r, r.errno
	}
	return rule{}, 0
}

// seccompNotif and seccompNotifResp mirror struct seccomp_notif / seccomp_notif_resp
// (include/uapi/linux/seccomp.h); x/sys has the ioctl numbers but not the structs.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  struct {
		Nr                 int32
		Arch               uint32
		InstructionPointer uint64
		Args               [6]uint64
	}
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// answer sends resp for req; a notification withdrawn meanwhile (the caller was
// interrupted or died) is not an error.
func answer(listener int, resp *seccompNotifResp) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(resp))); errno != 0 && errno != unix.ENOENT {
		return fmt.Errorf("seccomp listener: send: %w", errno)
	}
	return nil
}

// idValid says whether notification id is still pending (its caller alive, waiting).
func idValid(listener int, id uint64) bool {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return errno == 0
}

// ErrNotifyStopped: the server was stopped before the run's processes were all gone.
var ErrNotifyStopped = errors.New("seccomp listener: stopped")

// NotifyServer serves one run's listener.
type NotifyServer struct {
	listener int
	grants   *Grants
	// connectTCP: connect(2) comes here (Filter.ConnectCheck) and may reach these ports
	// of the host's loopback only; nil: connect is not checked.
	connectTCP []uint16
	tcpOnly    bool           // the filter has Filter.TCPOnly
	inflight   sync.WaitGroup // connects made for the run, answered when done
	on         func(Notice)
	stop       atomic.Bool
	done       chan struct{}
	err        error
	served     atomic.Int64
}

// notifyPoll is how often a server with nothing to do checks whether it was stopped.
const notifyPoll = 200 * time.Millisecond

// ServeNotify serves listener (which it owns and closes) until no process is left under
// its filter or Stop is called: every refused call is answered with its row's errno and
// passed to on, every traced call continues and is passed to on when it lies outside
// grants (nil: trace nothing). on runs on the server's goroutine after the caller was
// answered; it must not block for long (the run's next refused call waits meanwhile).
func ServeNotify(listener int, grants *Grants, on func(Notice)) *NotifyServer {
	return ServeNotifyWith(listener, NotifyConfig{Grants: grants}, on)
}

// NotifyConfig is what a listener must know of the filter it serves.
type NotifyConfig struct {
	Grants *Grants // nil: trace nothing
	// TCPOnly: the filter has Filter.TCPOnly (its rows refuse what they refuse).
	TCPOnly bool
	// ConnectTCP, for a filter with ConnectCheck: the run's connects to 127.0.0.1 on these
	// ports are made, every other connect of an IPv4/IPv6 socket is refused (EACCES) and
	// passed to on. nil: connect is not checked.
	ConnectTCP []uint16
}

// ServeNotifyWith is ServeNotify for the filter c describes.
func ServeNotifyWith(listener int, c NotifyConfig, on func(Notice)) *NotifyServer {
	s := &NotifyServer{listener: listener, grants: c.Grants, tcpOnly: c.TCPOnly, on: on, done: make(chan struct{})}
	if c.ConnectTCP != nil {
		s.connectTCP = append([]uint16{}, c.ConnectTCP...)
	}
	go s.loop()
	return s
}

// Stop ends the server, waiting up to bound for the run's last calls to be answered (a
// server that is stopped closes the listener: later refused calls get ENOSYS from the
// kernel, still a refusal). It returns how many notifications were served.
func (s *NotifyServer) Stop(bound time.Duration) int64 {
	select {
	case <-s.done:
	case <-time.After(bound):
		s.stop.Store(true)
		<-s.done
	}
	return s.served.Load()
}

// Done is closed once the server has ended.
func (s *NotifyServer) Done() <-chan struct{} { return s.done }

func (s *NotifyServer) loop() {
	defer close(s.done)
	defer unix.Close(s.listener)
	defer s.inflight.Wait() // their answers go to the listener
	for !s.stop.Load() {
		fds := []unix.PollFd{{Fd: int32(s.listener), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(notifyPoll/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			s.err = err
			return
		}
		if n == 0 {
			continue
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			if err := s.serveOne(); err != nil {
				s.err = err
				return
			}
			continue
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return // nothing runs under the filter any more
		}
	}
}

func (s *NotifyServer) serveOne() error {
	var req seccompNotif
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); errno != 0 {
		if errno == unix.EINTR || errno == unix.ENOENT || errno == unix.EAGAIN {
			return nil
		}
		return fmt.Errorf("seccomp listener: recv: %w", errno)
	}
	s.served.Add(1)
	nr, args := int(req.Data.Nr), req.Data.Args
	if nr == unix.SYS_CONNECT && s.connectTCP != nil {
		return s.serveConnect(&req)
	}
	resp := seccompNotifResp{ID: req.ID}
	r, errno := verdictFor(s.tcpOnly, nr, args)
	if errno != 0 {
		resp.Error = -int32(errno)
		if err := answer(s.listener, &resp); err != nil {
			return err
		}
		if errno != unix.ENOSYS && s.on != nil && !ownThread(int(req.Pid)) {
			n := Notice{Pid: int(req.Pid), Syscall: r.name, Denied: true, Errno: unix.ErrnoName(errno), When: r.when()}
			if r.check == socketFamily || r.check == socketPair {
				n.Object = socketObject(args)
			}
			s.on(n)
		}
		return nil
	}
	// Traced: look before letting it go on (the caller waits, so its memory holds still
	// unless another of its threads writes it).
	var n *Notice
	if _, tt := verdictTable(); s.grants != nil && s.on != nil {
		if t, ok := tt[nr]; ok && !ownThread(int(req.Pid)) {
			n = s.look(int(req.Pid), t, args)
			if n != nil && !idValid(s.listener, req.ID) {
				n = nil // the caller is gone; its pid may be someone else's now
			}
		}
	}
	resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	if err := answer(s.listener, &resp); err != nil {
		return err
	}
	if n != nil {
		s.on(*n)
	}
	return nil
}

// look reads what traced call t names and returns a Notice when it lies outside the grants.
func (s *NotifyServer) look(pid int, t traceCall, args [6]uint64) *Notice {
	mem, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(mem)
	if t.access == accessConnect {
		if s.grants.Network {
			return nil // what an open network reaches is the egress policy's to say
		}
		l := min(int(uint32(args[2])), maxTraceAddr)
		buf := make([]byte, l)
		if k, err := unix.Pread(mem, buf, int64(args[1])); err != nil || k < 2 {
			return nil
		} else {
			buf = buf[:k]
		}
		addr, ok := sockaddrString(buf)
		if !ok {
			return nil
		}
		return &Notice{Pid: pid, Syscall: t.name, Access: "connect", Address: addr}
	}
	p, err := readCString(mem, args[t.pathArg])
	if err != nil || p == "" {
		return nil // fstatat(fd, "", AT_EMPTY_PATH) and the like name no path
	}
	if !strings.HasPrefix(p, "/") {
		base := ""
		dirfd := -100 // AT_FDCWD
		if t.dirArg >= 0 {
			dirfd = int(int32(args[t.dirArg]))
		}
		if dirfd == unix.AT_FDCWD {
			base, err = os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		} else {
			base, err = os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(dirfd))
		}
		if err != nil || !strings.HasPrefix(base, "/") {
			return nil
		}
		p = filepath.Join(base, p)
	}
	p = filepath.Clean(p)
	acc := t.access
	if acc == accessOpen {
		fl := args[t.flagsArg]
		if fl&unix.O_ACCMODE != unix.O_RDONLY || fl&(unix.O_CREAT|unix.O_TRUNC) != 0 {
			acc = accessWrite
		}
	}
	if s.grants.allows(p, acc) {
		return nil
	}
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) && acc != accessWrite {
		// Missing on the host too: the call fails whatever the grants (a loader probing
		// /etc/ld.so.preload, a search along a path list), no refusal to report.
		return nil
	}
	return &Notice{Pid: pid, Syscall: t.name, Path: p, Access: accessName(acc)}
}

func accessName(a accessKind) string {
	switch a {
	case accessWrite:
		return "write"
	case accessStat:
		return "stat"
	case accessExec:
		return "exec"
	case accessConnect:
		return "connect"
	}
	return "read"
}

// readCString reads a NUL-terminated string at addr, at most maxTracePath bytes, never
// past the end of the page it is on in one read (the next page may be unmapped).
func readCString(mem int, addr uint64) (string, error) {
	var out []byte
	const page = 4096
	for len(out) < maxTracePath {
		chunk := page - int(addr%page)
		chunk = min(chunk, maxTracePath-len(out))
		buf := make([]byte, chunk)
		k, err := unix.Pread(mem, buf, int64(addr))
		if err != nil {
			return "", err
		}
		if k == 0 {
			return "", errors.New("short read")
		}
		if i := slices.Index(buf[:k], 0); i >= 0 {
			return string(append(out, buf[:i]...)), nil
		}
		out = append(out, buf[:k]...)
		addr += uint64(k)
	}
	return "", errors.New("path longer than PATH_MAX")
}

// sockaddrString renders an AF_INET or AF_INET6 address; other families are not network
// destinations (unix sockets are the socket filter's).
func sockaddrString(b []byte) (string, bool) {
	fam := binary.NativeEndian.Uint16(b)
	switch fam {
	case unix.AF_INET:
		if len(b) < 8 {
			return "", false
		}
		ip := netip.AddrFrom4([4]byte(b[4:8]))
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[2:4])).String(), true
	case unix.AF_INET6:
		if len(b) < 24 {
			return "", false
		}
		ip := netip.AddrFrom16([16]byte(b[8:24]))
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[2:4])).String(), true
	}
	return "", false
}

// within reports whether p is root or lies beneath it.
func within(p, root string) bool {
	root = filepath.Clean(root)
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// allows says whether the grants let the run make access acc to p (by path; a miss is
// checked again on the host's resolution of symlinks, so /lib64 -> usr/lib64 counts).
func (g *Grants) allows(p string, acc accessKind) bool {
	if g.allowsPath(p, acc) {
		return true
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		// A missing file in a directory reached through a link.
		if d, derr := filepath.EvalSymlinks(filepath.Dir(p)); derr == nil {
			r = filepath.Join(d, filepath.Base(p))
		} else {
			return false
		}
	}
	return r != p && g.allowsPath(r, acc)
}

func (g *Grants) allowsPath(p string, acc accessKind) bool {
	// /proc is always the run's own (a fresh procfs in a view; granted read-only without).
	if within(p, "/proc") && acc != accessWrite {
		return true
	}
	in := func(roots []string) bool {
		for _, r := range roots {
			if within(p, r) {
				return true
			}
		}
		return false
	}
	switch acc {
	case accessWrite:
		return in(g.ReadWrite)
	case accessExec:
		return in(g.ReadWrite) || in(g.ReadExec)
	case accessStat:
		// Metadata of a granted path, and of the directories leading to one (the view
		// shows those as directories), is not refused.
		if in(g.ReadWrite) || in(g.ReadOnly) || in(g.ReadExec) {
			return true
		}
		for _, roots := range [][]string{g.ReadWrite, g.ReadOnly, g.ReadExec} {
			for _, r := range roots {
				if within(filepath.Clean(r), p) {
					return true
				}
			}
		}
		return false
	}
	return in(g.ReadWrite) || in(g.ReadOnly) || in(g.ReadExec)
}

// InstallNotifyFilter installs f (Notify and/or Trace) with a listener on the calling
// thread and returns the listener (close-on-exec). ErrListenerBusy: a filter this thread
// already runs under has a listener of its own (fledge running inside fledge); install the
// filter without Notify and Trace then.
func InstallNotifyFilter(f Filter) (int, error) {
	if !SeccompSupported() {
		return -1, ErrSeccompArch
	}
	fd, err := install(f, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	if errors.Is(err, unix.EBUSY) {
		return -1, fmt.Errorf("%w: %w", ErrListenerBusy, err)
	}
	return fd, err
}

// NotifySupported reports whether the kernel has seccomp user notification with
// CONTINUE (5.5+): the listener answers refusals and lets traced calls go on.
func NotifySupported() bool {
	if !SeccompSupported() {
		return false
	}
	notifyOnce.Do(func() {
		// SECCOMP_GET_NOTIF_SIZES exists with user notification (5.0); CONTINUE came in
		// 5.5 with SECCOMP_USER_NOTIF_FLAG_CONTINUE, probed by the action being known.
		var sizes [3]uint16
		_, _, e1 := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&sizes)))
		act := uint32(unix.SECCOMP_RET_USER_NOTIF)
		_, _, e2 := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&act)))
		notifyOK = e1 == 0 && e2 == 0 && int(sizes[0]) >= int(unsafe.Sizeof(seccompNotif{}))
	})
	return notifyOK
}

var (
	notifyOnce sync.Once
	notifyOK   bool
)

// ownThread says whether tid is a thread of this process: the launch thread runs under the
// filter it installed until it exits, and its own calls (leaving the run's cgroups) are
// fledge's, not the run's.
func ownThread(tid int) bool {
	if tid == os.Getpid() {
		return true
	}
	_, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid))
	return err == nil
}

// connectWhen is the condition of a connect ConnectCheck refuses.
const connectWhen = "a TCP connect to anything but the session's proxy (127.0.0.1, its port)"

// serveConnect answers a connect(2) of a run whose TCP may reach the allowed loopback ports
// only. Landlock lets that port through at any address, and what the caller's memory says
// can change after it is read (another thread writes it), so an allowed connect is never
// let go on: fledge takes the caller's socket (pidfd_getfd) and connects it itself to the
// address it read and checked, then answers the caller with connect's result. A socket of
// another family (unix, netlink) reaches no TCP destination: its connect goes on.
func (s *NotifyServer) serveConnect(req *seccompNotif) error {
	resp := seccompNotifResp{ID: req.ID}
	pid, args := int(req.Pid), req.Data.Args
	fd, sa, cont, errno, n := s.checkConnect(pid, req.ID, args)
	switch {
	case cont:
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	case sa != nil:
		// Made off the server's goroutine: a connect may wait (a full backlog), and the
		// run's other calls must not wait behind it.
		s.inflight.Add(1)
		go func() {
			defer s.inflight.Done()
			defer unix.Close(fd)
			if err := unix.Connect(fd, sa); err != nil {
				e, ok := err.(unix.Errno)
				if !ok {
					e = unix.ECONNREFUSED
				}
				resp.Error = -int32(e)
			}
			_ = answer(s.listener, &resp)
		}()
		return nil
	default:
		resp.Error = -int32(errno)
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	if err := answer(s.listener, &resp); err != nil {
		return err
	}
	if n != nil && s.on != nil {
		s.on(*n)
	}
	return nil
}

// checkConnect decides one connect: go on (cont: not an IP socket), make it to sa on the
// caller's socket fd (a copy the caller shares), or refuse with errno (n: the record).
func (s *NotifyServer) checkConnect(pid int, id uint64, args [6]uint64) (fd int, sa unix.Sockaddr, cont bool, errno unix.Errno, n *Notice) {
	fd = -1
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fd, nil, false, unix.EACCES, nil
	}
	defer unix.Close(pidfd)
	if fd, err = unix.PidfdGetfd(pidfd, int(int32(args[0])), 0); err != nil {
		if errors.Is(err, unix.EBADF) {
			return -1, nil, false, unix.EBADF, nil
		}
		return -1, nil, false, unix.EACCES, nil
	}
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fd, nil, false, unix.ENOTSOCK, nil
	}
	if dom != unix.AF_INET && dom != unix.AF_INET6 {
		return fd, nil, true, 0, nil
	}
	mem, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fd, nil, false, unix.EACCES, nil
	}
	defer unix.Close(mem)
	buf := make([]byte, min(int(uint32(args[2])), maxTraceAddr))
	k, err := unix.Pread(mem, buf, int64(args[1]))
	if err != nil || k < 2 {
		return fd, nil, false, unix.EFAULT, nil
	}
	buf = buf[:k]
	var ip netip.Addr
	var port uint16
	switch fam := binary.NativeEndian.Uint16(buf); {
	case fam == unix.AF_INET && len(buf) >= 8:
		ip, port = netip.AddrFrom4([4]byte(buf[4:8])), binary.BigEndian.Uint16(buf[2:4])
	case fam == unix.AF_INET6 && len(buf) >= 24:
		ip, port = netip.AddrFrom16([16]byte(buf[8:24])), binary.BigEndian.Uint16(buf[2:4])
	}
	if ip.Unmap() != netip.AddrFrom4([4]byte{127, 0, 0, 1}) || !slices.Contains(s.connectTCP, port) {
		addr, _ := sockaddrString(buf)
		if !idValid(s.listener, id) || ownThread(pid) {
			return fd, nil, false, unix.EACCES, nil
		}
		return fd, nil, false, unix.EACCES, &Notice{Pid: pid, Syscall: "connect", Denied: true,
			Errno: unix.ErrnoName(unix.EACCES), When: connectWhen, Address: addr}
	}
	if !idValid(s.listener, id) {
		return fd, nil, false, unix.EACCES, nil // the caller is gone: its pid may be another's
	}
	if dom == unix.AF_INET6 {
		return fd, &unix.SockaddrInet6{Port: int(port), Addr: netip.AddrFrom4([4]byte{127, 0, 0, 1}).As16()}, false, 0, nil
	}
	return fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}, false, 0, nil
}
