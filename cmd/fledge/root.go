// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/ui"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// Streams are the command's I/O, injectable so commands are testable without a terminal.
type Streams = protocolhost.Streams

func defaultStreams() Streams { return Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }

// Globals are the global flags and the environment they default from.
type Globals struct {
	NonInteractive bool
	Project        string
	ConfigDir      string
	Streams        Streams
	// Trace: the plugin's runs are traced (run --trace, tools call --trace, plugins learn).
	Trace bool
	// Verbose (-v): servers' stderr reaches the terminal live, not only their logs.
	Verbose bool
	// sessionStarted, when set, is told the session id of the run (plugins learn).
	sessionStarted func(id string)
	// launch: the host is opened to run a plugin at once (protocolhost.Options.Launch).
	launch bool
	// redact takes the secret values the opened host handed plugins out of fledge's final
	// error line (Host.Redact); nil until a host is opened.
	redact func(string) string
}

// configDir resolves --config-dir, FLEDGE_CONFIG_DIR, $XDG_CONFIG_HOME/fledge, ~/.config/fledge.
func (g *Globals) configDir() (string, error) {
	dir := g.ConfigDir
	if dir == "" {
		dir = os.Getenv("FLEDGE_CONFIG_DIR")
	}
	if dir == "" {
		if x := os.Getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
			dir = filepath.Join(x, "fledge")
		}
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot find the config dir: set FLEDGE_CONFIG_DIR: %w", err)
		}
		dir = filepath.Join(home, ".config", "fledge")
	}
	return filepath.Abs(dir)
}

// stateDir is where fledge keeps state (the default audit log's dir); plugins never see it.
func stateDir() string {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "fledge")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".local", "state", "fledge")
}

func (g *Globals) nonInteractive() bool {
	if g.NonInteractive {
		return true
	}
	v := strings.ToLower(os.Getenv("FLEDGE_NON_INTERACTIVE"))
	return v == "1" || v == "true" || v == "yes"
}

// openHost opens fledge's side of a plugin run (policy, sandbox, audit log) for a command
// that runs, installs or changes plugins. Commands that only read (list) do not need it.
func (g *Globals) openHost() (*protocolhost.Host, error) {
	cd, err := g.configDir()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	protocolhost.SetVersion(version)
	h, err := protocolhost.Open(protocolhost.Options{
		ConfigDir: cd, StateDir: stateDir(), ProjectFlag: g.Project,
		NonInteractive: g.nonInteractive(), Streams: g.Streams,
		Trace: g.Trace, SessionStarted: g.sessionStarted, Verbose: g.Verbose, Launch: g.launch,
	})
	if err == nil {
		g.redact = h.Redact
	}
	return h, err
}

// runPlugin is `fledge <command> [args]` and `fledge run <command> [args]`.
func runPlugin(ctx context.Context, g *Globals, command string, args []string) error {
	g.launch = true
	h, err := g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	return h.RunCommand(ctx, command, args)
}

// Main runs the CLI and returns the process exit status: ExitBrokenPipe (141, as a shell's
// program killed by SIGPIPE) whenever the reader of its stdout or stderr went away, once
// the plugin session that was running has ended (protocolhost.WatchOutput).
func Main(args []string, streams Streams) int {
	protocolhost.WatchOutput()
	code := runMain(args, streams)
	if protocolhost.OutputClosed() {
		return ExitBrokenPipe
	}
	return code
}

func runMain(args []string, streams Streams) int {
	g := &Globals{Streams: streams}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	redact := g.redact
	if redact == nil {
		redact = func(s string) string { return s }
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" || (ee.Err != nil && ee.Code != ExitOK) {
			printError(streams.Err, redact(ee.Error()))
		}
		return ee.Code
	}
	printError(streams.Err, redact(err.Error()))
	if errors.Is(err, ErrUsage) || isCobraUsage(err) {
		return ExitUsage
	}
	return ExitFailure
}

// printError writes fledge's final error line. It often carries a plugin's own words (a
// tool's error message, an invoke-v1 error, a handshake's refusal), so it goes through the
// terminal sanitiser like every other plugin text: no OSC/DCS/CSI from a plugin reaches
// the user's terminal through an error, whatever the adapter.
func printError(w io.Writer, msg string) {
	fmt.Fprintf(w, "fledge: %s\n", ui.Sanitize(msg))
}

// isCobraUsage recognises cobra's flag and argument errors, which are usage errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "flag needs an argument", "invalid argument", "accepts ", "requires at least", "unknown command", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func newRootCmd(g *Globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "fledge [global flags] <plugin-command> [args...]",
		Short: "A security-hardened host for untrusted fledge-v1 plugins",
		Long: `fledge runs third-party plugins and treats each one as hostile: every exec and cwd
passes a path guard and an OS sandbox, process trees die on timeout, and every decision
lands in a tamper-evident audit log.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				_ = cmd.Help()
				return &ExitError{Code: ExitUsage}
			}
			return runPlugin(cmd.Context(), g, args[0], args[1:])
		},
	}
	// Flags after the plugin command belong to the plugin.
	root.Flags().SetInterspersed(false)
	pf := root.PersistentFlags()
	pf.BoolVar(&g.NonInteractive, "ni", false, "non-interactive: never prompt (also FLEDGE_NON_INTERACTIVE=1)")
	pf.BoolVar(&g.NonInteractive, "non-interactive", false, "same as --ni")
	pf.BoolVarP(&g.Verbose, "verbose", "v", false, "show servers' stderr (MCP, JSON-RPC 2.0) as it comes; otherwise kept in 'fledge plugins logs NAME' and shown when a server fails")
	pf.StringVar(&g.Project, "project", "", "project root (default: nearest ancestor with fledge.toml or .git)")
	pf.StringVar(&g.ConfigDir, "config-dir", "", "config dir (default: $FLEDGE_CONFIG_DIR, $XDG_CONFIG_HOME/fledge, ~/.config/fledge)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Msg: err.Error() + " (see 'fledge --help')"}
	})

	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newRunCmd(g), newPluginsCmd(g), newAuditCmd(g), newDoctorCmd(g), newToolsCmd(g), newHooksCmd(g), newServeCmd(g))
	root.AddCommand(newInvokeCmd(g))
	root.AddCommand(newSecretsCmd(g)) // secrets.go
	refuseUnknownSubcommands(root)
	return root
}

func newRunCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "run <plugin-command> [args...]",
		Short: "Run a plugin command (the same as 'fledge <plugin-command>')",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !g.Trace {
				return runPlugin(cmd.Context(), g, args[0], args[1:])
			}
			session := ""
			g.sessionStarted = func(id string) { session = id }
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			err = h.RunCommand(cmd.Context(), args[0], args[1:])
			traceHint(g, h.TraceSummary(session), session)
			return err
		},
	}
	c.Flags().SetInterspersed(false)
	c.Flags().BoolVar(&g.Trace, "trace", false, "record every path and network destination the plugin and its commands try outside their grants (kernel_denied records; slower)")
	return c
}
