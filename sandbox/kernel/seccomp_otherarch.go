// SPDX-License-Identifier: MIT

//go:build linux && !amd64 && !arm64

package kernel

// auditArch 0: no filter for this architecture; the sandbox reports the restrictions it
// carries as not enforced.
const auditArch = 0

const sysKexecLoad = -1

// sysKexecFileLoad: 32-bit architectures have no kexec_file_load.
const sysKexecFileLoad = -1

var (
	modeRules  []modeRule
	archRules  []rule
	traceCalls []traceCall
)
