// SPDX-License-Identifier: MIT

// Package darwin confines fledge's children on macOS with Seatbelt: a generated SBPL profile
// run through /usr/bin/sandbox-exec, process-group kill, and rlimits through the re-exec stub.
//
// The profile generator (Profile) is pure and builds on every OS, so its golden files are
// checked on Linux CI too; only the runner (sandbox_darwin.go) is darwin-only.
package darwin

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/fledgehq/fledge/egress"

	"github.com/fledgehq/fledge/sandbox"
)

// What the profile borrows, and from where (all read with the search tool, none copied):
//   - Chromium's common.sb / network.sb and OpenAI codex-rs (seatbelt_base_policy.sbpl,
//     seatbelt_platform_defaults.sbpl, seatbelt_network_policy.sbpl): `(deny default)` as the
//     base, fork/exec allowed because children inherit the policy, `signal (target
//     same-sandbox)`, the read-only system roots, the /dev specials, the opendirectoryd
//     libinfo lookup (getpwuid), ipc-posix-sem for Python's multiprocessing, the sysctl
//     allow-list instead of blanket sysctl-read, and the DNS/TLS mach services that only
//     come with network.
//   - Anthropic sandbox-runtime (macos-sandbox-utils.ts): Seatbelt is last-match-wins, so
//     denies are emitted after the allows they must override; metadata reads on the
//     ancestors of granted paths so realpath() works; network-outbound split into
//     `(remote ip ...)` rather than a bare allow, which would also open every unix socket
//     (docker.sock and friends).
//   - youtube-unthrottle's seatbelt_policy.scm: the mDNSResponder unix socket as the only
//     unix socket network mode needs.
// Where fledge is stricter than all of them: process-exec only from read+exec roots, no
// process-info on anything but the process itself, no user-preference-read, no iokit, no
// wildcard mach-lookup, no blanket /private/var or /Applications read.

// Errors from profile generation. Each wraps sandbox.ErrInvalidSpec, so callers that only
// know the sandbox contract still classify them.
var (
	// ErrBadPath: a path cannot be expressed safely in an SBPL string literal (NUL, newline or
	// another control character, invalid UTF-8), is relative, not clean, or is "/".
	ErrBadPath = fmt.Errorf("%w: path not allowed in a seatbelt profile", sandbox.ErrInvalidSpec)
	// ErrBadKind: the spec's Kind is not one fledge knows.
	ErrBadKind = fmt.Errorf("%w: unknown kind", sandbox.ErrInvalidSpec)
)

// PathError says which path of which list was refused, and why.
type PathError struct {
	List string // "read_write", "read_only", "read_exec", "deny", "path", "stub", "temp"
	Path string
	Err  error
}

func (e *PathError) Error() string {
	return fmt.Sprintf("seatbelt profile: %s entry %q: %v", e.List, e.Path, e.Err)
}

func (e *PathError) Unwrap() error { return e.Err }

// ProfileOptions are the inputs of Profile that are not part of the policy.
type ProfileOptions struct {
	// Stub is the absolute path of the program sandbox-exec runs first (fledge re-executed as
	// the stub). It may be read and exec'd; nothing else next to it may.
	Stub string
	// TempDir is the run's private temp dir (read-write); empty when the spec has none.
	TempDir string
	// Resolve canonicalises a path before it goes into a rule. Seatbelt matches the resolved
	// vnode path, so on macOS "/tmp/x" must become "/private/tmp/x" or the rule never
	// matches. nil uses paths as given. Injected so the generator stays pure: goldens use
	// PrivateAliases, the runner uses ResolveExisting.
	Resolve func(string) (string, error)
}

// access kinds, in the order they are emitted when two rules share a path: allows first,
// deny last, so a deny of the very path an allow names wins (last match wins).
type accessKind int

const (
	kindReadOnly accessKind = iota
	kindReadExec
	kindReadWrite
	kindExecFile // one executable (the stub, spec.Path): read, exec, map
	kindDeny
)

// rule operations per kind. Deny also blocks process-exec so a read+exec root cannot re-open
// a denied subtree for execution.
var kindOps = map[accessKind]string{
	kindReadOnly:  "(allow file-read* (subpath %s))",
	kindReadExec:  "(allow file-read* process-exec file-map-executable (subpath %s))",
	kindReadWrite: "(allow file-read* file-write* (subpath %s))",
	kindExecFile:  "(allow file-read* process-exec file-map-executable (literal %s))",
	kindDeny:      "(deny file-read* file-write* process-exec (subpath %s))",
}

type entry struct {
	path string
	kind accessKind
}

// System roots every profile may read (and, for SystemExec, execute). macOS spellings: /etc,
// /tmp and /var are symlinks into /private, so only /private/... forms are listed.
var (
	// SystemExec: where the shell and the common tools live. /usr covers /usr/local (Intel
	// Homebrew); the CommandLineTools path is where the /usr/bin/git-style shims exec to.
	SystemExec = []string{
		"/bin",
		"/sbin",
		"/usr",
		"/System",
		"/Library/Apple",
		"/Library/Developer/CommandLineTools",
	}
	// SystemRead: configuration and data a shell and libc read, never executable.
	SystemRead = []string{
		"/private/etc",
		"/private/var/db/timezone",
		"/private/var/db/dyld", // dyld shared cache on older releases (newer: under /System)
		"/private/var/select",  // /bin/sh execs the shell this dir's "sh" link names
		"/Library/Preferences/Logging",
	}
	// systemReadFiles are single files (literal, not subpath).
	systemReadFiles = []string{
		"/private/var/db/xcode_select_link", // xcrun shims resolve the developer dir through it
		"/dev/random",
		"/dev/urandom",
	}
	// machServices: the minimal lookups for a shell and common tools (user/group lookup,
	// logging, notify(3) for timezone changes, confstr temp dirs).
	machServices = []string{
		"com.apple.bsd.dirhelper",
		"com.apple.logd",
		"com.apple.system.logger",
		"com.apple.system.notification_center",
		"com.apple.system.opendirectoryd.libinfo",
		"com.apple.system.opendirectoryd.membership",
	}
	// networkMachServices come only with network: DNS configuration and TLS trust.
	networkMachServices = []string{
		"com.apple.SecurityServer",
		"com.apple.SystemConfiguration.DNSConfiguration",
		"com.apple.SystemConfiguration.configd",
		"com.apple.networkd",
		"com.apple.ocspd",
		"com.apple.trustd.agent",
	}
	// sysctlNames are readable; anything else (notably kern.proc.all, the process table) is not.
	sysctlNames = []string{
		"hw.activecpu", "hw.byteorder", "hw.cachelinesize", "hw.cpufamily", "hw.cputype",
		"hw.logicalcpu", "hw.logicalcpu_max", "hw.machine", "hw.memsize", "hw.model",
		"hw.ncpu", "hw.nperflevels", "hw.pagesize", "hw.pagesize_compat", "hw.physicalcpu",
		"hw.physicalcpu_max", "hw.vectorunit",
		"kern.argmax", "kern.hostname", "kern.maxfilesperproc", "kern.maxproc",
		"kern.ngroups", "kern.osproductversion", "kern.osrelease", "kern.ostype",
		"kern.osvariant_status", "kern.osversion", "kern.secure_kernel", "kern.usrstack64",
		"kern.version", "machdep.cpu.brand_string", "sysctl.proc_cputype", "vm.loadavg",
	}
	// sysctlPrefixes: CPU feature probes (Go, Rust, Node runtimes read them at start).
	sysctlPrefixes = []string{"hw.optional.", "hw.perflevel"}
)

// Profile generates the Seatbelt profile for spec. It is pure: the same spec and options give
// the same bytes on every OS (given a pure Resolve). It refuses, with an error wrapping
// sandbox.ErrInvalidSpec, any path it cannot express exactly.
//
// Layout: deny default; process, mach, sysctl and device baseline; system roots; the spec's
// allows; its denies (so every Deny path comes after every allow that covers it: Seatbelt
// honours the last matching rule); then allows nested inside a Deny path (a plugin's data dir
// inside the config dir), which re-open just that subtree, and denies nested in those; network
// last. Within each layer, shallower paths first.
func Profile(spec *sandbox.Spec, opts ProfileOptions) (string, error) {
	if spec == nil {
		return "", fmt.Errorf("%w: nil spec", sandbox.ErrInvalidSpec)
	}
	switch spec.Kind {
	case sandbox.KindExec, sandbox.KindPlugin, sandbox.KindLegacy:
	default:
		return "", fmt.Errorf("%w: %q", ErrBadKind, spec.Kind)
	}
	entries, err := profileEntries(spec, opts)
	if err != nil {
		return "", err
	}
	entries = dedupe(entries)
	denies := denyPaths(entries)
	sortEntries(entries, denies)

	var b strings.Builder
	writeBaseline(&b, spec)
	writeGranted(&b, entries, denies)
	writeLine(&b, "")
	writeNetwork(&b, spec)
	return b.String(), nil
}

// entryList is one list of paths the profile grants or denies, named as errors name it.
type entryList struct {
	list  string
	kind  accessKind
	paths []string
}

// profileEntries turns every path of the spec and options into entries in their exact
// spellings, refusing (as a *PathError) any path that cannot be expressed.
func profileEntries(spec *sandbox.Spec, opts ProfileOptions) ([]entry, error) {
	lists := []entryList{
		{"read_only", kindReadOnly, spec.Access.ReadOnly},
		{"read_exec", kindReadExec, spec.Access.ReadExec},
		{"read_write", kindReadWrite, spec.Access.ReadWrite},
		{"deny", kindDeny, spec.Access.Deny},
	}
	if opts.TempDir != "" {
		lists = append(lists, entryList{"temp", kindReadWrite, []string{opts.TempDir}})
	}
	if opts.Stub != "" {
		lists = append(lists, entryList{"stub", kindExecFile, []string{opts.Stub}})
	}
	if spec.Path != "" {
		lists = append(lists, entryList{"path", kindExecFile, []string{spec.Path}})
	}
	var entries []entry
	for _, l := range lists {
		for _, p := range l.paths {
			spellings, err := canonical(p, l.kind, opts.Resolve)
			if err != nil {
				return nil, &PathError{List: l.list, Path: p, Err: err}
			}
			for _, s := range spellings {
				entries = append(entries, entry{path: s, kind: l.kind})
			}
		}
	}
	return entries, nil
}

// sortEntries orders entries by layer (see Profile), then shallower paths first, then by
// path and kind so the output is the same bytes every time.
func sortEntries(entries []entry, denies []string) {
	layer := make(map[entry]int, len(entries))
	for _, e := range entries {
		layer[e] = layerOf(e, denies)
	}
	sort.SliceStable(entries, func(i, j int) bool {
		li, lj := layer[entries[i]], layer[entries[j]]
		if li != lj {
			return li < lj
		}
		di, dj := depth(entries[i].path), depth(entries[j].path)
		if di != dj {
			return di < dj
		}
		if entries[i].path != entries[j].path {
			return entries[i].path < entries[j].path
		}
		return entries[i].kind < entries[j].kind
	})
}

// writeLine writes one formatted line of the profile.
func writeLine(b *strings.Builder, format string, args ...any) {
	fmt.Fprintf(b, format+"\n", args...)
}

// writeBaseline writes what every profile has, whatever the spec grants: the header, deny
// default, the process, mach, sysctl and device baseline, and the system roots.
func writeBaseline(b *strings.Builder, spec *sandbox.Spec) {
	writeLine(b, "(version 1)")
	writeLine(b, "; fledge %s profile for %s", spec.Kind, sanitizeComment(spec.Name))
	writeLine(b, "(deny default)")
	writeLine(b, "")
	writeLine(b, "; processes: children inherit this profile; exec is limited by path below")
	writeLine(b, "(allow process-fork)")
	writeLine(b, "(allow signal (target same-sandbox))")
	writeLine(b, "(allow process-info* (target self))")
	writeLine(b, "(allow ipc-posix-sem)")
	writeLine(b, "")
	writeLine(b, "; mach services a shell and libc need")
	writeMulti(b, "(allow mach-lookup", "global-name", machServices)
	writeLine(b, "")
	writeLine(b, "; sysctl allow-list (the process table stays hidden)")
	b.WriteString("(allow sysctl-read")
	for _, n := range sysctlNames {
		fmt.Fprintf(b, "\n  (sysctl-name %s)", mustQuote(n))
	}
	for _, n := range sysctlPrefixes {
		fmt.Fprintf(b, "\n  (sysctl-name-prefix %s)", mustQuote(n))
	}
	b.WriteString(")\n")
	writeLine(b, "")
	writeLine(b, "; devices and path resolution")
	writeLine(b, `(allow file-read* (literal "/"))`)
	writeLine(b, `(allow file-read-metadata (literal "/dev") (literal "/etc") (literal "/tmp") (literal "/var"))`)
	writeLine(b, `(allow file-read* file-write-data (literal "/dev/null") (literal "/dev/zero"))`)
	writeLine(b, `(allow file-read-data file-write-data (subpath "/dev/fd"))`)
	writeLine(b, `(allow file-read* file-write-data file-ioctl (literal "/dev/dtracehelper"))`)
	writeLine(b, "")
	writeLine(b, "; system roots")
	for _, p := range SystemExec {
		writeLine(b, kindOps[kindReadExec], mustQuote(p))
	}
	for _, p := range SystemRead {
		writeLine(b, kindOps[kindReadOnly], mustQuote(p))
	}
	b.WriteString("(allow file-read*")
	for _, p := range systemReadFiles {
		fmt.Fprintf(b, "\n  (literal %s)", mustQuote(p))
	}
	b.WriteString(")\n")

}

// writeGranted writes the spec's own entries in order, with the metadata reads their
// ancestors need and the unlink pins that keep a deny in place.
func writeGranted(b *strings.Builder, entries []entry, denies []string) {
	// Ancestors of granted paths get metadata-only reads (stat, not readdir) so realpath() and
	// shells' $PWD checks work; the ones inside a Deny path are emitted after the nested allow
	// that needs them, the rest once here before any deny.
	var free []string
	seen := map[string]bool{"/": true}
	for _, e := range entries {
		if e.kind == kindDeny {
			continue
		}
		for _, a := range ancestors(e.path) {
			if seen[a] || under(a, denies) {
				continue
			}
			seen[a] = true
			free = append(free, a)
		}
	}
	sort.Strings(free)
	writeLine(b, "")
	writeLine(b, "; granted paths; denies after the allows they override (the last matching rule wins)")
	if len(free) > 0 {
		writeMulti(b, "(allow file-read-metadata", "literal", free)
	}
	writable := writablePaths(entries)
	for _, e := range entries {
		writeLine(b, kindOps[e.kind], mustQuote(e.path))
		if e.kind == kindDeny {
			// A writable ancestor could be renamed away from under the deny rule (rules
			// match paths, not vnodes), so its ancestors inside writable roots cannot be
			// unlinked or renamed.
			var pin []string
			for _, a := range ancestors(e.path) {
				if under(a, writable) {
					pin = append(pin, a)
				}
			}
			if len(pin) > 0 {
				writeMulti(b, "(deny file-write-unlink", "literal", pin)
			}
			continue
		}
		var nested []string
		for _, a := range ancestors(e.path) {
			if !seen[a] && under(a, denies) {
				seen[a] = true
				nested = append(nested, a)
			}
		}
		if len(nested) > 0 {
			writeMulti(b, "(allow file-read-metadata", "literal", nested)
		}
	}

}

// writeNetwork writes the network rules: all IP, the granted loopback ports, or none.
func writeNetwork(b *strings.Builder, spec *sandbox.Spec) {
	if spec.Network {
		writeLine(b, "; network: outbound IP anywhere, listening on loopback only; no unix sockets but DNS")
		writeLine(b, `(allow network-outbound (remote ip "*:*"))`)
		writeLine(b, `(allow network-outbound (literal "/private/var/run/mDNSResponder"))`)
		writeLine(b, `(allow network-bind network-inbound (local ip "localhost:*"))`)
		writeLine(b, "(allow system-socket)")
		writeMulti(b, "(allow mach-lookup", "global-name", networkMachServices)
	} else if rules := seatbeltEgress(spec.Egress); len(rules) > 0 {
		// Seatbelt's remote filter names only "localhost" or "*" as the host, so of a grant
		// by destination only the loopback ports can be expressed; the rest gets nothing
		// (docs/guarantees.md, "Network by destination").
		writeLine(b, "; network: the granted loopback ports only")
		for _, r := range rules {
			writeLine(b, r)
		}
		writeLine(b, "(allow system-socket)")
	} else {
		writeLine(b, "; network: none")
		writeLine(b, "(deny network*)")
	}
}

// seatbeltEgress are the rules a grant by destination can be turned into on macOS: one per
// granted loopback port ("localhost:8080", "127.0.0.1:8080"), bounded like the Linux relay.
func seatbeltEgress(se sandbox.Egress) []string {
	eg, ok := se.(*egress.Session)
	if !ok || eg == nil || eg.Policy == nil {
		return nil
	}
	lo := netip.MustParseAddr("127.0.0.1")
	var out []string
	for _, d := range eg.Policy.Dests {
		if !(d.Host == "localhost" && !d.Wildcard) && !d.MatchesAddr(lo) {
			continue
		}
		for p := int(d.PortLo); p <= int(d.PortHi) && len(out) < 64; p++ {
			out = append(out, fmt.Sprintf(`(allow network-outbound (remote tcp "localhost:%d"))`, p))
		}
	}
	return out
}

func writeMulti(b *strings.Builder, head, filter string, items []string) {
	b.WriteString(head)
	for _, it := range items {
		fmt.Fprintf(b, "\n  (%s %s)", filter, mustQuote(it))
	}
	b.WriteString(")\n")
}

// canonical validates p and returns the spellings to emit. Seatbelt only ever sees resolved
// paths, so an allow is emitted under its resolved spelling alone (the alias spelling would
// be a dead rule); a deny under both, in case resolution changes under us (a path created
// later, a resolver that could not see it).
func canonical(p string, kind accessKind, resolve func(string) (string, error)) ([]string, error) {
	clean, err := checkPath(p)
	if err != nil {
		return nil, err
	}
	out := []string{clean}
	if resolve != nil {
		r, err := resolve(clean)
		if err != nil {
			return nil, fmt.Errorf("%w: resolve: %w", ErrBadPath, err)
		}
		rc, err := checkPath(r)
		if err != nil {
			return nil, fmt.Errorf("resolved to %q: %w", r, err)
		}
		switch {
		case rc == clean:
		case kind == kindDeny:
			out = append(out, rc)
		default:
			out = []string{rc}
		}
	}
	return out, nil
}

// checkPath accepts an absolute, clean path (a trailing slash is tolerated) that an SBPL
// string literal can carry exactly.
func checkPath(p string) (string, error) {
	if _, err := Quote(p); err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: not absolute", ErrBadPath)
	}
	trimmed := strings.TrimRight(p, "/")
	if trimmed == "" {
		// "/" would grant or deny the whole filesystem; no policy means that.
		return "", fmt.Errorf("%w: the filesystem root", ErrBadPath)
	}
	if filepath.Clean(trimmed) != trimmed {
		// Lexical cleaning of ".." can disagree with the kernel's resolution through
		// symlinks, so an unclean path is refused rather than guessed at.
		return "", fmt.Errorf("%w: not clean", ErrBadPath)
	}
	return trimmed, nil
}

// Quote returns s as an SBPL string literal. SBPL strings are Scheme strings: backslash and
// double quote are escaped with a backslash. Control characters (NUL, newline, ...) and
// invalid UTF-8 are refused rather than escaped: no legitimate path has them, and an escape
// the profile parser reads differently would silently change what a rule matches.
func Quote(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: invalid UTF-8", ErrBadPath)
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f:
			return "", fmt.Errorf("%w: control character %U", ErrBadPath, r)
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// mustQuote is for strings already validated (constants, checked paths).
func mustQuote(s string) string {
	q, err := Quote(s)
	if err != nil {
		panic(err) // unreachable: every caller passes a checked path or a constant
	}
	return q
}

// sanitizeComment keeps a spec name from ending the comment line or smuggling bytes in.
func sanitizeComment(s string) string {
	if s == "" {
		return "(unnamed)"
	}
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError || b.Len() >= 64 {
			b.WriteByte('?')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func dedupe(es []entry) []entry {
	seen := make(map[entry]bool, len(es))
	out := es[:0]
	for _, e := range es {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

func depth(p string) int { return strings.Count(p, "/") }

// layerOf orders the access rules: 2k for an allow strictly inside k Deny paths, 2k+1 for a
// deny strictly inside k other Deny paths. An allow covering a deny always lands in a lower
// layer than it, a deny of the same path as an allow in the next one, and an allow nested in a
// deny in a higher one.
func layerOf(e entry, denies []string) int {
	k := 0
	for _, d := range denies {
		if e.path != d && within(e.path, d) {
			k++
		}
	}
	if e.kind == kindDeny {
		return 2*k + 1
	}
	return 2 * k
}

func writablePaths(es []entry) []string {
	var w []string
	for _, e := range es {
		if e.kind == kindReadWrite {
			w = append(w, e.path)
		}
	}
	return w
}

func denyPaths(es []entry) []string {
	var d []string
	for _, e := range es {
		if e.kind == kindDeny {
			d = append(d, e.path)
		}
	}
	return d
}

// under reports whether p is one of roots or inside one.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if within(p, r) {
			return true
		}
	}
	return false
}

// within reports whether p equals root or lies below it (both clean and absolute).
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

// ancestors of a clean absolute path, excluding "/" and p itself, shallowest first.
func ancestors(p string) []string {
	var out []string
	for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
		out = append(out, d)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
