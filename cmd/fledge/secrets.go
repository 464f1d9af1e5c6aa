// SPDX-License-Identifier: MIT

package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
)

// newSecretsCmd is `fledge secrets set|list|remove`: values a plugin may be granted by
// name ([capabilities] secrets), kept 0600 in fledge's state dir, which no plugin or
// command can reach. A variable of the same name in your environment wins at run time.
func newSecretsCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "secrets",
		Short: "Store secrets that plugins are granted by name",
		Long: `Store secrets that plugins are granted by name ([capabilities] secrets = ["NAME"]).

A granted secret reaches that plugin's own process as the environment variable NAME, taken
from your environment or, when it is not set there, from this store. It never reaches the
plugin's commands or another plugin, and no audit record or message of fledge shows its
value, even when the plugin hands it back as text of its own (a command line, a store key, a
name it looks up): fledge writes [secret:NAME] instead. A value needs at least 8 bytes.`,
	}
	c.AddCommand(&cobra.Command{
		Use:   "set <NAME>",
		Short: "Store a secret (its value is read from standard input, not echoed on a terminal)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return secretsSet(g, args[0])
		},
	}, &cobra.Command{
		Use:   "list",
		Short: "List the stored secrets' names",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := plugin.SecretNames(stateDir())
			if err != nil {
				return exitErr(ExitFailure, "secrets: %v", err)
			}
			for _, n := range names {
				fmt.Fprintln(g.Streams.Out, n)
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "remove <NAME>",
		Short: "Delete a stored secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := plugin.RemoveSecret(stateDir(), args[0]); err != nil {
				return exitErr(ExitUsage, "secrets remove: %v", err)
			}
			return nil
		},
	})
	return c
}

func secretsSet(g *Globals, name string) error {
	in := g.Streams.In
	var value []byte
	var err error
	if in != nil && term.IsTerminal(int(in.Fd())) {
		fmt.Fprintf(g.Streams.Err, "value for %s (not echoed): ", name)
		value, err = term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(g.Streams.Err)
	} else if in != nil {
		value, err = io.ReadAll(io.LimitReader(in, plugin.MaxSecretBytes+2))
		value = []byte(strings.TrimSuffix(strings.TrimSuffix(string(value), "\n"), "\r"))
	} else {
		return exitErr(ExitUsage, "secrets set: no standard input to read the value from")
	}
	if err != nil {
		return exitErr(ExitFailure, "secrets set %s: reading the value: %v", name, err)
	}
	if len(value) == 0 {
		return exitErr(ExitUsage, "secrets set %s: empty value", name)
	}
	if len(value) < audit.MinSecretBytes {
		// A value this short matches ordinary text: redacting it would shred the audit
		// log, not redacting it would show it there.
		return exitErr(ExitUsage, "secrets set %s: the value has %d bytes; a secret needs at least %d, so that fledge can keep it out of the audit log", name, len(value), audit.MinSecretBytes)
	}
	if err := plugin.SetSecret(stateDir(), name, value); err != nil {
		code := ExitFailure
		if errors.Is(err, plugin.ErrSecretName) || errors.Is(err, plugin.ErrSecretTooLarge) {
			code = ExitUsage
		}
		return exitErr(code, "secrets set: %v", err)
	}
	fmt.Fprintf(g.Streams.Out, "stored secret %s\n", name)
	return nil
}
