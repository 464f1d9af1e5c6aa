// SPDX-License-Identifier: MIT

package audit

// Detail keys: the names callers should use in Record.Details so that `audit show`, the
// OCSF/ECS mapping in docs/audit.md and downstream collectors agree on them.
const (
	DetailCommand        = "command"           // exec: the command line as requested (string)
	DetailArgv           = "argv"              // exec: argument vector ([]string)
	DetailCwdRequested   = "cwd_requested"     // exec, cwd_refused: cwd the plugin asked for
	DetailCwdResolved    = "cwd_resolved"      // exec: cwd after the path guard resolved it
	DetailExitCode       = "exit_code"         // plugin_exit, exec_outcome (int)
	DetailSignal         = "signal"            // plugin_exit, exec_outcome: terminating signal name
	DetailDurationMS     = "duration_ms"       // plugin_exit, exec_outcome (int, milliseconds)
	DetailTimedOut       = "timed_out"         // exec_outcome (bool)
	DetailOOMKilled      = "oom_killed"        // exec_outcome (bool)
	DetailProcsKilled    = "processes_killed"  // exec_outcome: processes left over and killed (int)
	DetailPeakMemory     = "peak_memory_bytes" // exec_outcome (int)
	DetailStdoutBytes    = "stdout_bytes"      // exec_outcome (int)
	DetailStderrBytes    = "stderr_bytes"      // exec_outcome (int)
	DetailOutputTruncate = "output_truncated"  // exec_outcome (bool)
	DetailCapability     = "capability"        // store/load/metadata/exec denials: capability name
	DetailCapabilities   = "capabilities"      // install/grant: granted capability list
	DetailKey            = "key"               // store, load: storage key
	DetailBytes          = "bytes"             // store, load: value size
	DetailPromptKind     = "prompt"            // prompt: confirm | input | select ...
	DetailAnswered       = "answered"          // prompt (bool; false = cancelled)
	DetailLimit          = "limit"             // limit_exceeded: which bound
	DetailLimitValue     = "limit_value"       // limit_exceeded: the bound's value
	DetailCount          = "count"             // malformed_lines: lines seen this session
	DetailSample         = "sample"            // malformed_lines: first bad line, truncated
	DetailMissing        = "missing"           // sandbox_degraded: what could not be enforced
	DetailMessage        = "message"           // free text for humans
	DetailRefusal        = "refusal"           // plugin_start deny: why the run was refused (Refusal* kinds)

	// Written by the log itself.
	DetailSkippedOffset = "skipped_offset" // log_recovered: byte offset of the torn bytes
	DetailSkippedBytes  = "skipped_bytes"  // log_recovered: length of the torn bytes
	DetailSkippedSHA256 = "skipped_sha256" // log_recovered: SHA-256 (hex) of the torn bytes
	DetailTruncated     = "truncated"      // any record whose details exceeded MaxRecordBytes
	DetailOrigBytes     = "original_bytes"
	DetailOrigSHA256    = "original_sha256"
	DetailPreview       = "preview"
	DetailEncodeError   = "details_error" // details that could not be encoded as JSON
)
