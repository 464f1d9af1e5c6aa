// SPDX-License-Identifier: MIT

package audit

// EventKernelDenied is a refusal the kernel made a plugin or one of its commands, seen by
// the sandbox (docs/audit.md, "kernel_denied"): a syscall on the seccomp deny-list, or, in
// trace mode, a filesystem path or network destination outside the grants, or a denial
// Landlock made that the kernel's audit logged (kind landlock). Decision deny.
// Rate-limited per run: the first of each kind as it happens, then one record with the
// true count (final) when the run has ended.
const EventKernelDenied = "kernel_denied"

// Details of kernel_denied.
const (
	DetailKind    = "kind"    // kernel_denied: syscall | path | network | landlock | overflow
	DetailSyscall = "syscall" // kernel_denied: the syscall's name (openat, io_uring_setup, ...)
	DetailErrno   = "errno"   // kernel_denied: the error the caller got (EPERM, EACCES)
	DetailWhen    = "when"    // kernel_denied: the deny-list row's condition
	DetailPath    = "path"    // kernel_denied (trace): the path the call named, absolute
	DetailAccess  = "access"  // kernel_denied (trace): read | write | exec | stat | connect; landlock: the blockers (fs.write_file, ...)
	DetailAddress = "address" // kernel_denied (trace): the destination, host:port
	DetailObject  = "object"  // kernel_denied (landlock): the rest of the object as logged (dev=, ino=, port)
	DetailPid     = "pid"     // kernel_denied: the calling process, as the host sees it
	DetailTraced  = "traced"  // kernel_denied: seen by trace mode (observation, not a decision)
	DetailFinal   = "final"   // kernel_denied: the run has ended; count is the true total
)
