// SPDX-License-Identifier: MIT

//go:build !linux

package kernel

import "time"

// MaxLandlockABI: no Landlock outside Linux.
const MaxLandlockABI = 0

// LandlockABI is 0: Landlock exists only on Linux.
func LandlockABI() int { return 0 }

// ApplyLandlock fails: Landlock exists only on Linux.
func ApplyLandlock(*Landlock) error { return ErrUnsupported }

// DropExecCaps does nothing: capability sets are Linux-only.
func DropExecCaps() error { return nil }

// SeccompSupported is false: the Linux seccomp filter has no equivalent here (Seatbelt's
// rules cover unix sockets on macOS).
func SeccompSupported() bool { return false }

// InstallFilter does nothing outside Linux (see SeccompSupported).
func InstallFilter(Filter) error { return nil }

// DeniedSyscalls is empty: there is no seccomp filter outside Linux.
func DeniedSyscalls(Filter) []DeniedSyscall { return nil }

// EnterView fails: mount namespaces are Linux-only.
func EnterView(*View, int) error { return ErrUnsupported }

// ViewSupported is false outside Linux.
func ViewSupported() bool { return false }

// NotifyServer does not exist outside Linux.
type NotifyServer struct{}

// ServeNotify is never called outside Linux (InstallNotifyFilter fails there).
func ServeNotify(int, *Grants, func(Notice)) *NotifyServer { return &NotifyServer{} }

// Stop does nothing.
func (*NotifyServer) Stop(time.Duration) int64 { return 0 }

// InstallNotifyFilter fails: there is no seccomp outside Linux.
func InstallNotifyFilter(Filter) (int, error) { return -1, ErrUnsupported }

// NotifySupported is false outside Linux.
func NotifySupported() bool { return false }

// ErrAuditUnknown: there is no Linux audit here.
var ErrAuditUnknown = ErrUnsupported

// KernelAuditStatus fails outside Linux.
func KernelAuditStatus() (bool, uint32, error) { return false, 0, ErrUnsupported }

// KernelAuditEnabled fails outside Linux.
func KernelAuditEnabled() (bool, error) { return false, ErrUnsupported }

// LandlockAuditName names nothing outside Linux.
func LandlockAuditName() string { return "" }

// SetThreadName fails outside Linux.
func SetThreadName(string) error { return ErrUnsupported }

// WatchLandlock watches nothing outside Linux.
func WatchLandlock(string, func(LandlockDenial)) (seen func() int64, stop func(), ok bool) {
	return func() int64 { return 0 }, func() {}, false
}

// AuditReadCapable is false outside Linux.
func AuditReadCapable() bool { return false }

// LandlockAuditReadable is false outside Linux.
func LandlockAuditReadable() bool { return false }
