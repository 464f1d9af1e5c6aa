// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// refuseUnknownSubcommands makes every command group (plugins, tools, audit, hooks) refuse
// a verb it does not have. cobra's default for a group is to print its help and succeed,
// so a script calling `fledge plugins nosuch` or `fledge audit sessions` would believe it
// worked: instead it is a usage error (exit 2) naming the closest known command. The group
// alone still prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownSubcommand(cmd, args[0])
	}
}

// unknownSubcommand is the usage error for a verb group does not have.
func unknownSubcommand(group *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, group.CommandPath())
	if group.SuggestionsMinimumDistance <= 0 {
		group.SuggestionsMinimumDistance = 2 // cobra's own default for the root
	}
	if s := group.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	} else {
		var known []string
		for _, sub := range group.Commands() {
			if sub.IsAvailableCommand() {
				known = append(known, sub.Name())
			}
		}
		msg += fmt.Sprintf(" (known: %s)", strings.Join(known, ", "))
	}
	return &ExitError{Code: ExitUsage, Msg: msg + fmt.Sprintf("; see '%s --help'", group.CommandPath())}
}
