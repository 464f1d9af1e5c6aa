package protocolhost

// kernelRefusalsText is doctor's line on kernel refusals in the audit log.
func kernelRefusalsText(v string) string {
	if v == "seccomp-notify" {
		return "recorded (kernel_denied: every seccomp deny-list refusal; --trace adds paths and destinations outside the grants)"
	}
	return "not recorded here (no seccomp user notification for this launcher or kernel); still refused"
}

// landlockAuditText is doctor's line on whether the kernel logs Landlock's own denials.
func landlockAuditText(v string) string {
	switch v {
	case "kernel-audit":
		return "logged by the kernel's audit (Landlock ABI 7+, audit enabled: AUDIT_LANDLOCK_ACCESS records, read with ausearch)"
	case "off":
		return "not logged: Landlock ABI 7+ would, but the kernel's audit is disabled (auditctl -e 1)"
	case "unknown":
		return "Landlock ABI 7+ can log them to the kernel's audit; whether it is enabled needs root to ask"
	}
	return "not logged by this kernel (Landlock ABI below 7)"
}
