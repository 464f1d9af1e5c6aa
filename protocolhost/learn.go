package protocolhost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fledgehq/fledge/audit"
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
	bindings, err := secretBindings(e.AuditPath, session, entry)
	if err != nil {
		return runErr, exitErr(ExitCannotRun, "audit log: %v", err)
	}
	learnReport(out, entry, session, found, paths, proj, home, append(h.secretsNotGranted(entry), bindings...))
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
		switch c := r.Details[audit.DetailCount].(type) {
		case json.Number: // audit.Read decodes numbers as json.Number
			if v, err := c.Int64(); err == nil {
				n = v
			}
		case float64:
			n = int64(c)
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
func learnReport(w io.Writer, entry *plugin.Entry, session string, found map[string]*learned,
	paths policy.Paths, proj *project.Info, home string, secrets []secretNote) {
	type proposal struct {
		item     string
		evidence []string
	}
	props := map[string]*proposal{}
	var order []string
	var apart []string
	propose := func(item, ev string) {
		p, ok := props[item]
		if !ok {
			p = &proposal{item: item}
			props[item] = p
			order = append(order, item)
		}
		p.evidence = append(p.evidence, ev)
	}
	var keys []string
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Paths some call opened, executed or wrote: a failed stat alone (a probe, a search
	// along a path list) is evidence of nothing needed.
	used := map[string]bool{}
	for _, k := range keys {
		if l := found[k]; l.kind == "path" && l.access != "stat" {
			used[l.target] = true
		}
	}
	for _, k := range keys {
		l := found[k]
		ev := fmt.Sprintf("%s %s %s", shown(l.syscall), shown(l.access), shown(l.target))
		switch l.kind {
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
		if shown(l.target) != l.target && (l.kind == "path" || l.kind == "landlock") {
			// Never proposed: a line to copy must say what it grants on its face.
			apart = append(apart, ev+": the path holds control or invisible characters")
			continue
		}
		switch l.kind {
		case "network":
			if entry.Granted.Network {
				apart = append(apart, ev+": the plugin holds network; the destination is refused by the egress policy")
			} else {
				// The destination itself, not the whole network.
				propose("network="+l.target, ev)
			}
		case "path":
			switch {
			case l.access == "stat" && !used[l.target]:
				// Looked for, never opened: not proposed.
			case l.access == "write":
				apart = append(apart, ev+": writes go through exec in the project, no grant gives them elsewhere")
			case proj != nil && policy.Within(l.target, proj.Root) && entry.Granted.FS() != policy.FilesystemProject:
				propose("filesystem=project", ev)
			default:
				if err := vetReadGrant(l.target, paths); err != nil {
					apart = append(apart, ev+": "+err.Error())
				} else {
					propose(policy.ReadGrantPrefix+tildePath(l.target, home), ev)
				}
			}
		case "landlock":
			// Landlock's own refusal, from the kernel's audit: a read of a path is lifted
			// by a read grant; anything else (a write, a port, a signal) by none.
			switch {
			case !landlockReadOnly(l.access) || l.target == "" || l.target == l.syscall:
				apart = append(apart, ev+": refused by Landlock, no grant gives it")
			case proj != nil && policy.Within(l.target, proj.Root) && entry.Granted.FS() != policy.FilesystemProject:
				propose("filesystem=project", ev)
			default:
				if err := vetReadGrant(l.target, paths); err != nil {
					apart = append(apart, ev+": "+err.Error())
				} else {
					propose(policy.ReadGrantPrefix+tildePath(l.target, home), ev)
				}
			}
		case "syscall", "overflow":
			if l.syscall == "socket" || l.syscall == "socketpair" {
				apart = append(apart, ev+": unix sockets are no plugin's grant ([sandbox] unix_sockets in config.toml opens them to every plugin; often only glibc asking nscd)")
			} else {
				apart = append(apart, ev+": on the kernel deny-list, no grant gives it")
			}
		}
	}
	for _, sn := range secrets {
		if sn.bound != "" {
			propose("secret="+sn.bound, sn.where)
			continue
		}
		propose("secret="+sn.name, fmt.Sprintf("%s is declared in plugin.toml and not granted, so the run did not get it (%s)", sn.name, sn.where))
	}
	fmt.Fprintf(w, "traced %s under its current grants (%s); session %s\n", entry.Name, entry.Granted.String(), session)
	if len(order) == 0 {
		fmt.Fprintln(w, "no refused access that a grant would let through: nothing to propose")
	} else {
		fmt.Fprintln(w, "proposed (nothing was granted; copy what you agree with):")
		for _, item := range order {
			p := props[item]
			fmt.Fprintf(w, "  fledge plugins grant %s %s\n", entry.Name, shellQuote(p.item))
			for _, ev := range p.evidence {
				fmt.Fprintf(w, "      evidence: %s\n", ev)
			}
		}
	}
	if len(apart) > 0 {
		fmt.Fprintln(w, "refused, and no grant would change it:")
		for _, a := range apart {
			fmt.Fprintf(w, "  %s\n", a)
		}
	}
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
