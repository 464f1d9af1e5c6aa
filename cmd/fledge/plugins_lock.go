// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// LockOptions is `fledge plugins lock`.
type LockOptions struct{ g *Globals }

func newLockCmd(g *Globals) *cobra.Command {
	o := &LockOptions{g: g}
	return &cobra.Command{
		Use:   "lock",
		Short: "Write fledge.lock: every installed plugin's source, version, digest, grants and tool pins",
		Long: `Write fledge.lock in the project: for each installed plugin its source, exact version,
content digest, grants and approved tool definitions (and, for npm: and pypi: packages, how
they were asked for and, for pypi:, every wheel's sha256). Commit it: 'fledge plugins sync'
installs exactly that set on another machine or in CI. A plugin whose files changed since
install, or whose tool definitions are held back for review, is refused and nothing is
written. Plugins and their commands can never write fledge.lock (it is read-only in every
sandbox view).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.Run() },
	}
}

func (o *LockOptions) Run() error {
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	res, err := h.Lock()
	if err != nil {
		return err
	}
	for _, p := range res.Plugins {
		fmt.Fprintf(o.g.Streams.Out, "locked %s %s (%s, %s)\n", p.Name, p.Version, p.Source, p.Digest)
	}
	fmt.Fprintf(o.g.Streams.Out, "wrote %s (%d plugins)\n", res.Path, len(res.Plugins))
	return nil
}

// SyncOptions is `fledge plugins sync`.
type SyncOptions struct{ g *Globals }

func newSyncCmd(g *Globals) *cobra.Command {
	o := &SyncOptions{g: g}
	return &cobra.Command{
		Use:   "sync",
		Short: "Install exactly the plugins fledge.lock pins, with exactly its grants",
		Long: `Install every plugin of the project's fledge.lock from its source at its exact version,
granting exactly what the lock says and asking nothing. A plugin whose content does not hash
to the pinned digest (or a pypi: wheel whose sha256 differs), or whose server lists tool
definitions other than the pinned ones, is refused and stays as it was. A plugin already
installed as pinned is left alone. CI runs 'fledge --ni plugins sync'.`,
		Example: "  fledge plugins lock && git add fledge.lock\n  fledge --ni plugins sync",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return o.Run(cmd.Context()) },
	}
}

func (o *SyncOptions) Run(ctx context.Context) error {
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	res, err := h.Sync(ctx)
	if res != nil {
		for _, n := range res.Unchanged {
			fmt.Fprintf(o.g.Streams.Out, "%s is installed as pinned\n", n)
		}
		fmt.Fprintf(o.g.Streams.Out, "synced: %d installed, %d already as pinned\n", len(res.Installed), len(res.Unchanged))
	}
	return err
}
