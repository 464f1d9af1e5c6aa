// SPDX-License-Identifier: MIT

package main

import (
	"github.com/spf13/cobra"
)

// DoctorOptions is `fledge doctor`.
type DoctorOptions struct {
	g    *Globals
	JSON bool
}

func newDoctorCmd(g *Globals) *cobra.Command {
	o := &DoctorOptions{g: g}
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Show what confinement this machine can enforce",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return o.Run() },
	}
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	return c
}

func (o *DoctorOptions) Run() error {
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	d := h.Doctor()
	if o.JSON {
		return writeJSON(o.g.Streams.Out, d.JSON())
	}
	d.WriteText(o.g.Streams.Out)
	return nil
}
