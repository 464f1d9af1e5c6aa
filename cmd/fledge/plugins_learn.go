package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
)

// LearnOptions is `fledge plugins learn NAME -- ARGS`: one traced run under the plugin's
// current grants, then the smallest grant change that would have let its refused accesses
// through, printed as commands to copy. It grants nothing.
type LearnOptions struct {
	g       *Globals
	Name    string
	Command string
	Args    []string
}

func newLearnCmd(g *Globals) *cobra.Command {
	o := &LearnOptions{g: g}
	c := &cobra.Command{
		Use:   "learn <name> [--command CMD] [-- args...]",
		Short: "Run a plugin traced under its current grants and propose the smallest grant change",
		Long: `Run one command of an installed plugin in trace mode (see 'fledge run --trace'),
under the grants it holds now and never more, and print the smallest change to its grants
that would have let the accesses it was refused through: a path it read (read=PATH, the
path itself, not its directory), the project (filesystem=project), the network. Each
proposal comes with its evidence (the syscall, the path or destination, how often) and as a
'fledge plugins grant' line to copy. Nothing is granted. Refusals no grant can lift (a
syscall on the kernel deny-list, a write outside the project, a key store such as ~/.ssh)
are listed apart.`,
		Example: "  fledge plugins learn lint -- --fix src/",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name, o.Args = args[0], args[1:]
			return o.Run(cmd.Context())
		},
	}
	c.Flags().StringVar(&o.Command, "command", "", "the plugin command to run (default: the one named like the plugin, else its first)")
	return c
}

// learned is one refused access, with how often and where it was seen.
type learned struct {
	kind, syscall, access, target string
	count                         int64
	commands                      []string
}

func (o *LearnOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e, err := openEnv(o.g)
	if err != nil {
		return err
	}
	reg, err := plugin.LoadRegistry(e.configDir)
	if err != nil {
		e.close()
		return exitErr(ExitCannotRun, "%v", err)
	}
	entry := reg.Find(o.Name)
	if entry == nil {
		e.close()
		return exitErr(ExitFailure, "no plugin named %q is installed", o.Name)
	}
	command := o.Command
	switch {
	case command == "" && slices.Contains(entry.Commands, entry.Name):
		command = entry.Name
	case command == "" && len(entry.Commands) > 0:
		command = entry.Commands[0]
	case command == "":
		e.close()
		return exitErr(ExitUsage, "plugin %s has no command to run: learn runs a plugin command", entry.Name)
	case !slices.Contains(entry.Commands, command):
		e.close()
		return exitErr(ExitUsage, "plugin %s has no command %q (it has: %s)", entry.Name, command, strings.Join(entry.Commands, ", "))
	}
	auditPath := e.auditPath
	cwd, _ := os.Getwd()
	proj, _ := project.Detect(cwd, o.g.Project)
	home, _ := os.UserHomeDir()
	dir := plugin.Dir(e.configDir, entry.Name)
	paths := e.paths(dir, filepath.Join(dir, "data"), proj)
	e.close()

	// The run: trace on, the grants as they are.
	session := ""
	g := *o.g
	g.Trace = true
	g.sessionStarted = func(id string) { session = id }
	runErr := runPlugin(ctx, &g, command, o.Args)
	if session == "" {
		return runErr // refused before it ran: nothing to learn from
	}

	found := map[string]*learned{}
	err = audit.Read(auditPath, func(r *audit.Record) error {
		if r.Session != session || r.Event != audit.EventKernelDenied {
			return nil
		}
		str := func(k string) string { s, _ := r.Details[k].(string); return s }
		n := int64(1)
		if c, ok := r.Details[audit.DetailCount].(float64); ok {
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
	if err != nil {
		return exitErr(ExitCannotRun, "audit log: %v", err)
	}
	o.report(o.g.Streams.Out, entry, session, found, paths, proj, home)
	if runErr != nil {
		// The run's own failure (often the very refusals above) is not learn's.
		fmt.Fprintf(o.g.Streams.Err, "fledge: note: the traced run ended with: %v\n", runErr)
	}
	return nil
}

// report prints the proposals: the smallest grant for each refused access a grant can
// lift, with its evidence; then what no grant lifts.
func (o *LearnOptions) report(w io.Writer, entry *plugin.Entry, session string, found map[string]*learned,
	paths policy.Paths, proj *project.Info, home string) {
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
		ev := fmt.Sprintf("%s %s %s", l.syscall, l.access, l.target)
		if l.kind == "syscall" {
			ev = l.syscall
		}
		ev += fmt.Sprintf(" (%s)", times(l.count))
		if len(l.commands) > 0 {
			ev += " by command: " + strings.Join(l.commands, "; ")
		}
		switch l.kind {
		case "network":
			if entry.Granted.Network {
				apart = append(apart, ev+": the plugin holds network; the destination is refused by the egress policy")
			} else {
				propose("network", ev)
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
				if err := policy.CheckReadGrant(l.target, paths); err != nil {
					apart = append(apart, ev+": "+err.Error())
				} else {
					propose(policy.ReadGrantPrefix+tildePath(l.target, home), ev)
				}
			}
		case "syscall", "overflow":
			apart = append(apart, ev+": on the kernel deny-list, no grant gives it")
		}
	}
	fmt.Fprintf(w, "traced %s under its current grants (%s); session %s\n", entry.Name, grantText(entry.Granted), session)
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
