// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/ui"
)

// Learn is `fledge plugins learn NAME -- ARGS`: one traced run of the plugin's command
// under its current grants, then the smallest grant change that would have let its refused
// accesses through, printed to out as lines to copy. It grants nothing. command "" is the
// command named like the plugin, else its first. The traced run's own failure is returned
// as note (for the caller to show), never as Learn's error.
func (h *Host) Learn(ctx context.Context, name, command string, args []string, out io.Writer) (note error, err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	e := h.Env
	reg, err := h.registry()
	if err != nil {
		return nil, err
	}
	entry := reg.Find(name)
	if entry == nil {
		return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
	}
	switch {
	case command == "" && slices.Contains(entry.Commands, entry.Name):
		command = entry.Name
	case command == "" && len(entry.Commands) > 0:
		command = entry.Commands[0]
	case command == "":
		return nil, exitErr(ExitUsage, "plugin %s has no command to run: learn runs a plugin command", entry.Name)
	case !slices.Contains(entry.Commands, command):
		return nil, exitErr(ExitUsage, "plugin %s has no command %q (it has: %s)", entry.Name, command, strings.Join(entry.Commands, ", "))
	}
	cwd, _ := os.Getwd()
	proj, _ := project.Detect(cwd, h.opts.ProjectFlag)
	home, _ := os.UserHomeDir()
	dir := plugin.Dir(e.ConfigDir, entry.Name)
	paths := e.Paths(dir, filepath.Join(dir, "data"), proj)

	// The run: trace on, the grants as they are, its output framed.
	session := ""
	prevTrace, prevHook, prevObserve := e.Trace, h.opts.SessionStarted, e.ObserveSecrets
	e.Trace, h.opts.SessionStarted, e.ObserveSecrets = true, func(id string) { session = id }, true
	runErr := h.framedRun(out, entry.Name, func() error { return h.RunCommand(ctx, command, args) })
	e.Trace, h.opts.SessionStarted, e.ObserveSecrets = prevTrace, prevHook, prevObserve
	if session == "" {
		return nil, runErr // refused before it ran: nothing to learn from
	}
	found, err := kernelDenials(e.AuditPath, session)
	if err != nil {
		return runErr, exitErr(ExitCannotRun, "audit log: %v", err)
	}
	net, err := sessionNetwork(e.AuditPath, session)
	if err != nil {
		return runErr, exitErr(ExitCannotRun, "audit log: %v", err)
	}
	bindings, err := secretBindings(e.AuditPath, session, entry)
	if err != nil {
		return runErr, exitErr(ExitCannotRun, "audit log: %v", err)
	}
	learnReport(out, entry, session, found, net, paths, proj, home, append(h.secretsNotGranted(entry), bindings...))
	return runErr, nil
}

// framedRun runs the traced run with everything it prints (the plugin's output, its
// stderr and log lines, fledge's warnings about it) framed by ui.FramedWriter, between
// two lines of fledge's own, and a rule above the report: no line the plugin writes can
// pass for a line of the report, such as a "fledge plugins grant" to copy that fledge
// never proposed. The run is non-interactive: a question's form would be drawn through
// the frame, which keeps no cursor movement.
func (h *Host) framedRun(out io.Writer, name string, run func() error) error {
	fmt.Fprintf(out, "fledge plugins learn: the traced run of %s prints what follows; each line of it is marked %q\n", name, ui.FramePrefix)
	prevStreams, prevNI := h.opts.Streams, h.opts.NonInteractive
	fo, fe := ui.NewFramedWriter(out, 0), ui.NewFramedWriter(h.stderr(), 0)
	h.opts.Streams.Out, h.opts.Streams.Err, h.opts.NonInteractive = fo, fe, true
	err := run()
	h.opts.Streams, h.opts.NonInteractive = prevStreams, prevNI
	_, _ = fo.Flush(), fe.Flush()
	fmt.Fprintf(out, "fledge plugins learn: the traced run of %s ended; what follows is fledge's report\n%s\n", name, strings.Repeat("─", ui.DefaultFrameWidth))
	return err
}

// secretNote is one secret the approved manifest declares and the plugin does not hold,
// with where the user has it (never its value).
type secretNote struct{ name, where, bound string }

// secretsNotGranted lists the declared secrets the plugin was not granted: the run did not
// get them, so a failure for want of one shows as nothing at all in the kernel's records.
// Only the approved manifest counts (a grant is checked against it); an edited one proposes
// nothing, as `plugins grant` would refuse it.
func (h *Host) secretsNotGranted(entry *plugin.Entry) []secretNote {
	m, _, err := plugin.LoadManifest(plugin.Dir(h.Env.ConfigDir, entry.Name))
	if err != nil || m.SHA256() != entry.ManifestSHA256 || !m.HoldsGrants() {
		return nil
	}
	var out []secretNote
	for _, n := range m.Declared().Secrets {
		if slices.Contains(entry.Granted.Secrets, n) {
			continue
		}
		where := "set neither in your environment nor in fledge's secret store: after granting, export it or store it with 'fledge secrets set " + n + "'"
		if _, ok := os.LookupEnv(n); ok {
			where = "set in your environment"
		} else if _, ok, err := plugin.LookupSecret(h.Env.StateDir, n); err == nil && ok {
			where = "stored with 'fledge secrets set'"
		} else if err != nil {
			where = "fledge's secret store: " + err.Error()
		}
		out = append(out, secretNote{name: n, where: where})
	}
	return out
}

// learned is one refused access, with how often and where it was seen.
type learned struct {
	kind, syscall, access, target string
	count                         int64
	commands                      []string
}

// kernelDenials reads a session's kernel_denied records, one entry per refusal kind with
// its true count.
func kernelDenials(auditPath, session string) (map[string]*learned, error) {
	found := map[string]*learned{}
	err := audit.Read(auditPath, func(r *audit.Record) error {
		if r.Session != session || r.Event != audit.EventKernelDenied {
			return nil
		}
		str := func(k string) string { s, _ := r.Details[k].(string); return s }
		n := int64(1)
		if c, ok := detailNumber(r.Details[audit.DetailCount]); ok {
			n = c
		}
		l := &learned{kind: str(audit.DetailKind), syscall: str(audit.DetailSyscall), access: str(audit.DetailAccess),
			target: str(audit.DetailPath) + str(audit.DetailAddress)}
		if l.target == "" {
			l.target = l.syscall
		}
		key := l.kind + "\x00" + l.syscall + "\x00" + l.access + "\x00" + l.target
		if prev, ok := found[key]; ok {
			l = prev
			if r.Details[audit.DetailFinal] == true {
				l.count = max(l.count, n)
			}
		} else {
			l.count = n
			found[key] = l
		}
		if c := str(audit.DetailCommand); c != "" && !slices.Contains(l.commands, c) && len(l.commands) < 3 {
			l.commands = append(l.commands, c)
		}
		return nil
	})
	return found, err
}

// netSeen is what fledge's network engine decided in a session: every connection of a
// run that holds destinations goes through it (and every lookup), so its records, not the
// trace's sight of a connect, say what was refused and by which name.
type netSeen struct {
	// allowed are the destinations it let through, as the trace writes an address.
	allowed map[string]bool
	refused []*netRefusal
	// names were looked up and refused: no grant names them.
	names []*netRefusal
}

// netRefusal is one refused connection (host or address, port) or lookup (host).
type netRefusal struct {
	host, address, why string
	port               uint16
	count              int64
}

// sessionNetwork reads a session's net_connect and net_dns records.
func sessionNetwork(auditPath, session string) (*netSeen, error) {
	n := &netSeen{allowed: map[string]bool{}}
	seen := map[string]*netRefusal{}
	err := audit.Read(auditPath, func(r *audit.Record) error {
		if r.Session != session || (r.Event != egress.EventConnect && r.Event != egress.EventDNS) {
			return nil
		}
		str := func(k string) string { s, _ := r.Details[k].(string); return s }
		port, _ := detailNumber(r.Details["port"])
		nr := &netRefusal{host: str("host"), address: str("address"), why: str("why"), port: uint16(port), count: 1}
		if c, ok := detailNumber(r.Details["suppressed"]); ok {
			nr.count += c
		}
		if r.Decision == audit.Allow {
			if a, err := netip.ParseAddr(nr.address); err == nil && r.Event == egress.EventConnect {
				n.allowed[netip.AddrPortFrom(a, nr.port).String()] = true
			}
			return nil
		}
		if r.Decision != audit.Deny {
			return nil
		}
		key := r.Event + "\x00" + nr.host + "\x00" + nr.why + "\x00" + strconv.Itoa(int(nr.port))
		if nr.host == "" {
			key += "\x00" + nr.address
		}
		if prev, ok := seen[key]; ok {
			prev.count += nr.count
			return nil
		}
		seen[key] = nr
		if r.Event == egress.EventDNS {
			n.names = append(n.names, nr)
		} else {
			n.refused = append(n.refused, nr)
		}
		return nil
	})
	return n, err
}

// detailNumber is a record's number as audit.Read hands it over (json.Number), or as a
// record built in memory holds it.
func detailNumber(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case float64:
		return int64(x), true
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint16:
		return int64(x), true
	}
	return 0, false
}

// TraceSummary is how many kernel_denied records a session left (run --trace says so).
func (h *Host) TraceSummary(session string) int {
	found, err := kernelDenials(h.Env.AuditPath, session)
	if err != nil {
		return 0
	}
	return len(found)
}

// report prints the proposals: the smallest grant for each refused access a grant can
// lift, with its evidence; then what no grant lifts.
func learnReport(w io.Writer, entry *plugin.Entry, session string, found map[string]*learned, net *netSeen,
	paths policy.Paths, proj *project.Info, home string, secrets []secretNote) {
	if net == nil {
		net = &netSeen{}
	}
	lp := &learnPlan{entry: entry, net: net, paths: paths, proj: proj, home: home, props: map[string]*learnProposal{}}
	// The destinations the plugin holds (nil: none, or an entry fledge no longer parses,
	// which its runs refuse anyway).
	if len(entry.Granted.NetworkTo) > 0 {
		lp.dests, _ = egress.NewPolicy(false, entry.Granted.NetworkTo)
	}
	var keys []string
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Paths some call opened, executed or wrote: a failed stat alone (a probe, a search
	// along a path list) is evidence of nothing needed.
	lp.used = map[string]bool{}
	for _, k := range keys {
		if l := found[k]; l.kind == "path" && l.access != "stat" {
			lp.used[l.target] = true
		}
	}
	for _, k := range keys {
		lp.addFound(found[k])
	}
	for _, r := range net.refused {
		lp.addNetRefused(r)
	}
	for _, sn := range secrets {
		if sn.bound != "" {
			lp.propose("secret="+sn.bound, sn.where)
			continue
		}
		lp.propose("secret="+sn.name, fmt.Sprintf("%s is declared in plugin.toml and not granted, so the run did not get it (%s)", sn.name, sn.where))
	}
	lp.print(w, session)
}

// learnPlan gathers learnReport's proposals (in the order first seen, each with its
// evidence) and the refusals no grant lifts, with what deciding between them needs.
type learnPlan struct {
	entry *plugin.Entry
	net   *netSeen
	dests *egress.Policy
	used  map[string]bool
	paths policy.Paths
	proj  *project.Info
	home  string

	props map[string]*learnProposal
	order []string
	apart []string
}

// learnProposal is one grant to propose and the evidence for it.
type learnProposal struct {
	item     string
	evidence []string
}

// propose adds ev as evidence for the grant item.
func (lp *learnPlan) propose(item, ev string) {
	p, ok := lp.props[item]
	if !ok {
		p = &learnProposal{item: item}
		lp.props[item] = p
		lp.order = append(lp.order, item)
	}
	p.evidence = append(p.evidence, ev)
}

// learnEvidence is the line that shows a person what the plugin was refused and how often.
func learnEvidence(l *learned) string {
	ev := fmt.Sprintf("%s %s %s", shown(l.syscall), shown(l.access), shown(l.target))
	switch l.kind {
	case "network":
		ev = fmt.Sprintf("%s %s", shown(l.syscall), shown(l.target))
	case "syscall":
		ev = shown(l.syscall)
	case "landlock":
		ev = fmt.Sprintf("landlock %s %s", shown(l.access), shown(l.target))
	}
	ev += fmt.Sprintf(" (%s)", times(l.count))
	if len(l.commands) > 0 {
		cs := make([]string, len(l.commands))
		for i, c := range l.commands {
			cs[i] = shown(c)
		}
		ev += " by command: " + strings.Join(cs, "; ")
	}
	return ev
}

// addFound proposes the grant that lifts one refusal from the trace, or sets it apart.
func (lp *learnPlan) addFound(l *learned) {
	entry := lp.entry
	ev := learnEvidence(l)
	if shown(l.target) != l.target && (l.kind == "path" || l.kind == "landlock") {
		// Never proposed: a line to copy must say what it grants on its face.
		lp.apart = append(lp.apart, ev+": the path holds control or invisible characters")
		return
	}
	switch l.kind {
	case "network":
		switch item, why := connectGrant(l.target, entry.Granted, lp.dests); {
		case lp.net.allowed[l.target]:
			// Let through by the engine (a name granted as localhost, say).
		case why != "":
			lp.apart = append(lp.apart, ev+": "+why)
		case item != "":
			lp.propose(item, ev)
		}
	case "path":
		switch {
		case l.access == "stat" && !lp.used[l.target]:
			// Looked for, never opened: not proposed.
		case l.access == "write" && lp.proj != nil && policy.Within(l.target, lp.proj.Root) && len(l.commands) == 0 &&
			!lp.entry.Granted.WritesProject() && !inGitDir(l.target, lp.proj.Root):
			// The plugin process itself wrote the project: project-rw gives that (its git
			// metadata stays read-only, so a write there is never proposed).
			lp.propose("filesystem=project-rw", ev)
		case l.access == "write":
			lp.apart = append(lp.apart, ev+": writes go through exec in the project (or the plugin's own with filesystem=project-rw), no grant gives them elsewhere, nor in git metadata")
		default:
			lp.proposeRead(l.target, ev)
		}
	case "landlock":
		// Landlock's own refusal, from the kernel's audit: a read of a path is lifted
		// by a read grant; anything else (a write, a port, a signal) by none.
		if !landlockReadOnly(l.access) || l.target == "" || l.target == l.syscall {
			lp.apart = append(lp.apart, ev+": refused by Landlock, no grant gives it")
		} else {
			lp.proposeRead(l.target, ev)
		}
	case "syscall", "overflow":
		if l.syscall == "socket" || l.syscall == "socketpair" {
			lp.apart = append(lp.apart, ev+": unix sockets are no plugin's grant ([sandbox] unix_sockets in config.toml opens them to every plugin; often only glibc asking nscd)")
		} else {
			lp.apart = append(lp.apart, ev+": on the kernel deny-list, no grant gives it")
		}
	}
}

// proposeRead proposes the grant that lets the plugin read target: the project when it
// is inside it, else a read grant of the path, unless that path may not be granted.
func (lp *learnPlan) proposeRead(target, ev string) {
	switch {
	case lp.proj != nil && policy.Within(target, lp.proj.Root) && !lp.entry.Granted.ReadsProject():
		lp.propose("filesystem=project", ev)
	default:
		if err := vetReadGrant(target, lp.paths); err != nil {
			lp.apart = append(lp.apart, ev+": "+err.Error())
		} else {
			lp.propose(policy.ReadGrantPrefix+tildePath(target, lp.home), ev)
		}
	}
}

// addNetRefused proposes the network grant for a connection the network engine refused
// as not granted, or sets it apart with why no grant would change it.
func (lp *learnPlan) addNetRefused(r *netRefusal) {
	dest := r.host
	if dest == "" {
		dest = r.address
		if a, err := netip.ParseAddr(r.address); err == nil && a.Is6() {
			dest = "[" + r.address + "]"
		}
	}
	dest += ":" + strconv.Itoa(int(r.port))
	ev := fmt.Sprintf("net_connect %s refused: %s (%s)", shown(dest), shown(r.why), times(r.count))
	if r.host != "" && r.address != "" {
		ev = fmt.Sprintf("net_connect %s (address %s) refused: %s (%s)", shown(dest), shown(r.address), shown(r.why), times(r.count))
	}
	switch {
	case shown(dest) != dest:
		lp.apart = append(lp.apart, ev+": the destination holds control or invisible characters")
	case r.why == egress.ReasonNotGranted && !lp.entry.Granted.Network:
		lp.propose("network="+dest, ev)
	case r.why == egress.ReasonPrivate:
		lp.apart = append(lp.apart, ev+": the name reached a private, loopback or link-local address; only a grant of that address itself opens it, never proposed")
	default:
		lp.apart = append(lp.apart, ev+": refused by fledge's network engine, no grant would change it")
	}
}

// print writes the report: the proposals with their evidence, the names looked up, and
// what no grant would change.
func (lp *learnPlan) print(w io.Writer, session string) {
	entry := lp.entry
	fmt.Fprintf(w, "traced %s under its current grants (%s); session %s\n", entry.Name, entry.Granted.String(), session)
	if len(lp.order) == 0 {
		fmt.Fprintln(w, "no refused access that a grant would let through: nothing to propose")
	} else {
		fmt.Fprintln(w, "proposed (nothing was granted; copy what you agree with):")
		for _, item := range lp.order {
			p := lp.props[item]
			fmt.Fprintf(w, "  fledge plugins grant %s %s\n", entry.Name, shellQuote(p.item))
			for _, ev := range p.evidence {
				fmt.Fprintf(w, "      evidence: %s\n", ev)
			}
		}
	}
	if len(lp.net.names) > 0 {
		// A lookup carries no port, and a grant needs one: the user says which.
		fmt.Fprintln(w, "names looked up and refused (a grant names the port the plugin connects to: network=NAME:PORT):")
		for _, r := range lp.net.names {
			fmt.Fprintf(w, "  %s (%s)\n", shown(r.host), times(r.count))
		}
	}
	if len(lp.apart) > 0 {
		fmt.Fprintln(w, "refused, and no grant would change it:")
		for _, a := range lp.apart {
			fmt.Fprintf(w, "  %s\n", a)
		}
	}
}

// connectGrant is the grant a traced connect to addr ("127.0.0.1:8080", "[::1]:80")
// lacked, or why none would help (both empty: not a refusal at all). A run that holds
// destinations connects through fledge's network engine, whose own records (net_connect,
// net_dns) say what it refused and under which name: the trace sees every connect there,
// the allowed ones too. Only a loopback port the engine never saw (no listener for an
// ungranted one in the plugin's namespace) is the trace's to report. Loopback is proposed
// as localhost, the name every loopback grant is written with, unless the user grants
// loopback by address.
func connectGrant(addr string, g policy.Grants, dests *egress.Policy) (item, why string) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", "not an address fledge can propose"
	}
	a, port := ap.Addr().Unmap(), ap.Port()
	switch {
	case g.Network:
		return "", "the plugin holds network; the destination is refused by the egress policy"
	case port == 53 && len(g.NetworkTo) > 0:
		return "", "" // fledge answered it: its net_dns records name what was refused
	case port == 53:
		// A name lookup through the resolver of /etc/resolv.conf (fledge's own answers it
		// in a run that holds destinations): names are granted, never a resolver.
		return "", "a name lookup through the resolver; fledge answers lookups of the names a grant holds itself (network=NAME:PORT), never grants the resolver"
	case len(g.NetworkTo) > 0 && !a.IsLoopback():
		// Decided by the engine: its net_connect record is the evidence (an IPv6 destination
		// has no route there at all).
		if a.Is6() {
			return "", "a plugin's network has no IPv6 route, no grant gives it"
		}
		return "", ""
	}
	if dests != nil && (dests.AddrAndPort(a, port) || (a.IsLoopback() && dests.NameAndPort("localhost", port))) {
		if a.Is6() && !dests.AddrAndPort(a, port) {
			return "", "granted as localhost, but a plugin reaches the host's loopback over IPv4 (127.0.0.1) only"
		}
		return "", "" // granted: what became of it is the engine's net_connect record
	}
	spelled := ap.String()
	if a.IsLoopback() && !loopbackByAddress(g.NetworkTo) {
		spelled = "localhost:" + strconv.Itoa(int(port))
	}
	return "network=" + spelled, ""
}

// loopbackByAddress reports whether the user grants a loopback destination by its address
// (127.0.0.1:8080) rather than as localhost: a proposal is spelled the same way.
func loopbackByAddress(dests []string) bool {
	for _, d := range dests {
		h, _, err := net.SplitHostPort(d)
		if err != nil {
			continue
		}
		if p, err := netip.ParsePrefix(h); err == nil && p.Addr().IsLoopback() {
			return true
		}
		if a, err := netip.ParseAddr(h); err == nil && a.IsLoopback() {
			return true
		}
	}
	return false
}

// landlockReadOnly reports whether a Landlock record's blockers ask only to read.
func landlockReadOnly(blockers string) bool {
	if blockers == "" {
		return false
	}
	for _, b := range strings.Split(blockers, ",") {
		if b != "fs.read_file" && b != "fs.read_dir" {
			return false
		}
	}
	return true
}

func times(n int64) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// tildePath writes a path under the home as ~/..., as the user would type it.
func tildePath(p, home string) string {
	if home != "" && policy.Within(p, home) && p != home {
		return "~/" + strings.TrimPrefix(p, strings.TrimSuffix(home, "/")+"/")
	}
	return p
}

// shellQuote quotes s for a POSIX shell when it needs it (a ~/ prefix stays unquoted so
// the shell expands it as the user typed it).
func shellQuote(s string) string {
	safe := func(r rune) bool {
		return r == '/' || r == '.' || r == '_' || r == '-' || r == '=' || r == '~' || r == '+' || r == ',' || r == ':' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
	}
	if strings.IndexFunc(s, func(r rune) bool { return !safe(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shown is s as the report prints it: as is when every character is visible, else
// Go-quoted. A refused path, a command line and a syscall name come from the plugin; a
// newline in one would print a line of its own (a forged "fledge plugins grant" to copy),
// an escape sequence would reach the terminal, a bidi override would reorder the line.
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }) >= 0 {
		return strconv.QuoteToASCII(s)
	}
	return s
}

// inGitDir reports whether path, inside root, has a .git element (git metadata, which no
// grant makes writable).
func inGitDir(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return true
	}
	for _, e := range strings.Split(filepath.ToSlash(rel), "/") {
		if e == ".git" || strings.HasSuffix(e, ".git") {
			return true
		}
	}
	return false
}
