// SPDX-License-Identifier: MIT

package protocolhost

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/sandbox"
)

// Doctor is what `fledge doctor` reports: what confinement this machine can enforce under
// the policy in force.
type Doctor struct {
	h       *Host
	rep     sandbox.Report
	refuses bool
}

// Doctor looks at the machine and the policy.
func (h *Host) Doctor() *Doctor {
	rep := h.Env.Sandbox.Report()
	strict := h.Env.Config.Sandbox.Strict
	// The same promises the Linux sandbox refuses strict runs for: no Landlock, no writable
	// cgroup, no host-death watchdog, or no private filesystem view (neither as root nor in
	// a user namespace).
	noView := rep.OS == "linux" && rep.FilesystemView == "none"
	refuses := strict && (rep.Confinement == "none" || rep.CgroupMode == "none" || !rep.CgroupWritable ||
		(rep.OS == "linux" && rep.HostDeath == "none") || noView)
	return &Doctor{h: h, rep: rep, refuses: refuses}
}

// JSON is the report as `doctor --json` prints it.
func (d *Doctor) JSON() map[string]any {
	e, rep := d.h.Env, d.rep
	return map[string]any{
		"fledge":           core.FledgeVersion(),
		"sandbox":          rep,
		"strict":           e.Config.Sandbox.Strict,
		"home_path":        homePATHEntries(e),
		"version_managers": versionManagers(e),
		"root":             os.Geteuid() == 0,
		"strict_refuse":    d.refuses,
		"config_dir":       e.ConfigDir,
		"config_file":      e.Config.File,
		"managed_policy":   managedJSON(e.Config.Managed),
		"audit_log":        e.AuditPath,
		"audit_export":     d.exportJSON(),
		"exec": map[string]any{
			"limits": limitsJSON(e.Config.ExecLimits()), "network": e.Config.NetworkAllowed(),
			"unprotect": unprotectJSON(e.Config),
		},
		"plugin": map[string]any{
			"limits": limitsJSON(e.Config.PluginLimits()),
		},
		"wasm_plugin": fledgev1.WasmInfo(e, nil, ""),
	}
}

// WriteText writes the report for a person.
func (d *Doctor) WriteText(w io.Writer) {
	e, rep := d.h.Env, d.rep
	fmt.Fprintf(w, "fledge %s\n", core.FledgeVersion())
	fmt.Fprintf(w, "  os / kernel:      %s %s\n", rep.OS, rep.Kernel)
	fmt.Fprintf(w, "  confinement:      %s\n", rep.Confinement)
	fmt.Fprintf(w, "  landlock ABI:     %d\n", rep.LandlockABI)
	fmt.Fprintf(w, "  cgroups:          %s (writable: %v) %s\n", rep.CgroupMode, rep.CgroupWritable, rep.CgroupPath)
	fmt.Fprintf(w, "  user namespaces:  %v\n", rep.UserNamespaces)
	fmt.Fprintf(w, "  network deny via: %s\n", rep.NetworkDeny)
	fmt.Fprintf(w, "  network by destination: %s\n", egressText(rep.NetworkEgress))
	if o := e.Config.NetworkOverride(); o != "" {
		fmt.Fprintf(w, "  warning: %s\n", o)
	}
	fmt.Fprintf(w, "  unix sockets:     refused via %s\n", rep.UnixSocketDeny)
	fmt.Fprintf(w, "  tree kill:        %s\n", rep.TreeKill)
	fmt.Fprintf(w, "  filesystem view:  %s\n", viewText(rep.FilesystemView))
	if rep.OS == "linux" {
		fmt.Fprintf(w, "  processes seen:   %s\n", pidNSText(rep.PidNamespace))
		fmt.Fprintf(w, "  SysV IPC, mqueue: %s\n", ipcNSText(rep.IPCNamespace))
		fmt.Fprintf(w, "  system files:     %s\n", systemFilesText(rep.SystemFiles))
	}
	fmt.Fprintf(w, "  git metadata:     %s\n", protectedText(e.Config, rep.FilesystemView))
	fmt.Fprintf(w, "  seccomp denies:   %s\n", seccompSummary(rep.SeccompDenied))
	if rep.OS == "linux" {
		fmt.Fprintf(w, "  kernel refusals:  %s\n", kernelRefusalsText(rep.KernelRefusals))
		fmt.Fprintf(w, "  landlock denials: %s\n", landlockAuditText(rep.LandlockAudit))
	}
	if rep.HostDeath == "watchdog" {
		fmt.Fprintf(w, "  if fledge dies:   a watchdog process kills every command and plugin it started\n")
	} else if rep.HostDeath != "" {
		fmt.Fprintf(w, "  if fledge dies:   commands and plugins it started keep running (%s)\n", rep.HostDeath)
	}
	fmt.Fprintf(w, "  strict policy:    %v\n", e.Config.Sandbox.Strict)
	lim := e.Config.ExecLimits()
	fmt.Fprintf(w, "  an exec gets:     rw project + plugin data + private tmp; memory %d MiB, pids %d, network: its plugin's grant%s\n",
		lim.MemoryBytes>>20, lim.Pids, map[bool]string{true: " (overridden: everything)", false: ""}[e.Config.NetworkAllowed()])
	fmt.Fprintf(w, "  a plugin gets:    ro its own dir, rw its data dir; project and network per grant\n")
	fmt.Fprintf(w, "  a wasm plugin:    %s\n", fledgev1.WasmInfoText(fledgev1.WasmInfo(e, nil, "")))
	fmt.Fprintf(w, "  config:           %s\n  audit log:        %s\n", e.ConfigDir, e.AuditPath)
	writeManaged(w, e.Config.Managed)
	fmt.Fprintf(w, "  audit export:     %s\n", d.exportText())
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	if os.Geteuid() == 0 && rep.FilesystemView != "mount-namespace" {
		fmt.Fprintf(w, "  warning: running as root: Landlock does not govern chmod/utime/xattrs, and every system file\n"+
			"           is root's own, so a command could change modes outside its sandbox (never contents).\n"+
			"           Run fledge as an unprivileged user where you can.\n")
	}
	vms := versionManagers(e)
	for _, vm := range vms {
		fmt.Fprintf(w, "  version manager:  %s from PATH entry %s: %s read+execute for plugins and commands\n", vm.Name, vm.PATHEntry, vm.Root)
		for _, x := range vm.ReadExec {
			fmt.Fprintf(w, "                    and %s (read+execute)\n", x)
		}
		for _, x := range vm.ReadOnly {
			fmt.Fprintf(w, "                    and %s (read-only: picks the version)\n", x)
		}
	}
	if hp := homePATHEntries(e); len(hp) > 0 {
		fmt.Fprintf(w, "  note: PATH entries inside $HOME are read+execute for commands: %s\n", strings.Join(hp, ", "))
		if len(vms) == 0 {
			fmt.Fprintf(w, "        a shim there that re-execs from elsewhere in $HOME fails confined unless its tree\n"+
				"        is granted: add it to [sandbox] read_only (a tree holding a PATH entry is read+execute)\n")
		}
	}
	if d.refuses {
		fmt.Fprintf(w, "  strict policy will REFUSE to run plugins here: %s\n", strings.Join(rep.Warnings, "; "))
	}
}

// egressText names the mode network by destination is enforced in.
func egressText(s string) string {
	if rest, ok := strings.CutPrefix(s, "proxy "); ok {
		return "enforced via the session's proxy " + rest
	}
	return s
}

// protectedText says what stays read-only inside writable roots, and what policy opted out.
func protectedText(c *policy.Config, view string) string {
	t := "hooks, config and .git files of repositories, worktrees and submodules in writable roots are read-only"
	if !privateView(view) {
		t += " only with the private filesystem view (not here)"
	}
	if len(c.Sandbox.Unprotect) > 0 {
		t += "; unprotected by policy: " + strings.Join(c.Sandbox.Unprotect, ", ")
	}
	return t
}

// unprotectJSON is [sandbox] unprotect as doctor and plugins info report it (never null).
func unprotectJSON(c *policy.Config) []string {
	return append([]string{}, c.Sandbox.Unprotect...)
}

// privateView reports whether view is a private filesystem view, built as root or in a user
// namespace: both protect the git metadata of writable roots (sandbox/linux buildView), so
// every line of doctor judges the view by this one test.
func privateView(view string) bool {
	return view == "mount-namespace" || view == "mount-namespace+userns" // linux.ViewUserNS
}

// viewText says what a command's filesystem looks like.
func viewText(view string) string {
	switch view {
	case "mount-namespace":
		return "private (mount namespace: only granted paths exist; .git/hooks and .git/config read-only)"
	case "mount-namespace+userns": // linux.ViewUserNS
		return "private (mount namespace in a user namespace: only granted paths exist; .git/hooks and .git/config\n" +
			"                    read-only; /proc is the run's own pid namespace, which ends with the command)"
	case "":
		return "n/a"
	}
	return "the host's (Landlock decides access; other paths exist and their metadata can change)"
}

// seccompSummary is the one-line form of the deny-list (doctor --json has every row).
func seccompSummary(denied []sandbox.DeniedSyscall) string {
	if len(denied) == 0 {
		return "nothing (no seccomp filter here)"
	}
	names := make([]string, 0, 6)
	for _, d := range denied {
		if len(names) == cap(names) {
			break
		}
		if d.Name != "socket" && d.Name != "socketpair" && d.Name != "openat2" { // the unix-socket line says those
			names = append(names, d.Name)
		}
	}
	return fmt.Sprintf("%d syscalls (%s, ...; doctor --json says when and why)", len(denied), strings.Join(names, ", "))
}

// limitsJSON renders limits with units in the key names (bytes, seconds) for JSON readers.
func limitsJSON(l sandbox.Limits) map[string]any {
	return map[string]any{
		"memory_bytes":    l.MemoryBytes,
		"pids":            l.Pids,
		"cpu_cores":       l.CPU,
		"open_files":      l.NoFile,
		"timeout_seconds": l.Timeout.Seconds(),
		"kill_grace_s":    l.KillGrace.Seconds(),
	}
}

// versionManagers are the version managers found from PATH (pyenv, nvm, asdf, mise, rbenv,
// volta), whose trees plugins and commands get.
func versionManagers(e *core.Env) []policy.VersionManager {
	vms := e.Paths("", "", nil).VersionManagers
	if vms == nil {
		vms = []policy.VersionManager{}
	}
	return vms
}

// homePATHEntries are the PATH entries inside $HOME that commands get read+execute on.
func homePATHEntries(e *core.Env) []string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return nil
	}
	home = core.Resolved(home)
	a := policy.ExecAccess(e.Paths("", "", nil), e.Config)
	out := []string{}
	mgr := map[string]bool{}
	for _, vm := range versionManagers(e) {
		mgr[vm.Root] = true
	}
	for _, d := range a.ReadExec {
		if policy.Within(d, home) && d != home && !mgr[d] {
			out = append(out, d)
		}
	}
	return out
}

// pidNSText says what a command finds in /proc.
// ipcNSText says whose SysV IPC objects and POSIX message queues a command reaches.
func ipcNSText(ns string) string {
	if ns == "per-run" { // linux.IPCPerRun
		return "its own run's only (an IPC namespace per run, gone with it)"
	}
	return "the host's: shared memory, message queues and semaphores of the user are reachable (no IPC namespace)"
}

// systemFilesText says what of /etc, /usr, /opt a command can read.
func systemFilesText(v string) string {
	if v == "others-only" { // linux.SystemFilesOthers
		return "what an ordinary user could read (root's 0600 files and 0700 dirs are closed, whatever their names)"
	}
	return "as root, every root-owned file but /etc's known secrets (shadow, sudoers, TLS/SSH host keys)"
}

func pidNSText(ns string) string {
	switch ns {
	case "per-plugin":
		return "its own plugin's only (a pid namespace per plugin, /proc its own)"
	case "per-run":
		return "its own run's only (a pid namespace per run, in a user namespace)"
	}
	return "the host's, in a read-only /proc (no pid namespace)"
}
