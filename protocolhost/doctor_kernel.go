// SPDX-License-Identifier: MIT

package protocolhost

// kernelRefusalsText is doctor's line on kernel refusals in the audit log.
func kernelRefusalsText(v string) string {
	if v == "seccomp-notify" {
		return "recorded (kernel_denied: the seccomp deny-list's refusals, but not its ENOSYS answers, and refused AF_UNIX sockets only with --trace, which adds paths and destinations outside the grants)"
	}
	return "not recorded here (no seccomp user notification for this launcher or kernel); still refused"
}

// landlockAuditText is doctor's line on whether the kernel logs Landlock's own denials.
func landlockAuditText(v string) string {
	switch v {
	case "recorded":
		return "recorded (kernel_denied kind landlock: the kernel's audit logs them, Landlock ABI 7+ with audit enabled, and fledge reads them as root)"
	case "kernel-audit":
		return "logged by the kernel's audit (Landlock ABI 7+, audit enabled: AUDIT_LANDLOCK_ACCESS records, read with ausearch)"
	case "off":
		return "not logged: Landlock ABI 7+ would, but the kernel's audit is disabled (auditctl -e 1; fledge then records them, as root, and never changes it itself)"
	case "unknown":
		return "Landlock ABI 7+ can log them to the kernel's audit; whether it is enabled needs root to ask"
	}
	return "not logged by this kernel (Landlock ABI below 7)"
}
