// SPDX-License-Identifier: MIT

package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/scaffold"
)

// NewOptions is `fledge plugins new`.
type NewOptions struct {
	g    *Globals
	Name string
	Lang string
	Dir  string // the plugin dir to create; default ./<name>
	SDK  string // go only: local fledge checkout for go.mod's replace directive
}

func newNewCmd(g *Globals) *cobra.Command {
	o := &NewOptions{g: g}
	c := &cobra.Command{
		Use:   "new <name> [--lang bash|python|go|go-wasm] [--dir DIR]",
		Short: "Create a working plugin from a template, ready to install",
		Long: `Create a new fledge-v1 plugin in DIR (default ./<name>), which must not exist yet.
The plugin declares only the store capability; it installs with
'fledge plugins install DIR --yes' and runs under 'fledge --ni <name>'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return o.Run()
		},
	}
	c.Flags().StringVar(&o.Lang, "lang", "bash", "language: "+strings.Join(scaffold.Languages, ", "))
	c.Flags().StringVar(&o.Dir, "dir", "", "directory to create (default ./<name>)")
	c.Flags().StringVar(&o.SDK, "sdk", "", "go only: a local fledge checkout to build the SDK from (go.mod replace)")
	return c
}

func (o *NewOptions) Run() error {
	dir := o.Dir
	if dir == "" {
		dir = o.Name
	}
	if o.SDK != "" && !scaffold.IsGo(o.Lang) {
		return exitErr(ExitUsage, "--sdk only applies to --lang go and go-wasm")
	}
	files, err := scaffold.Create(scaffold.Options{Name: o.Name, Lang: o.Lang, Dir: dir, SDKDir: o.SDK})
	switch {
	case errors.Is(err, scaffold.ErrInvalidName), errors.Is(err, scaffold.ErrUnknownLang):
		return exitErr(ExitUsage, "plugins new: %v", err)
	case err != nil:
		return exitErr(ExitFailure, "plugins new: %v", err)
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Path
	}
	w := o.g.Streams.Out
	show := dir
	if !filepath.IsAbs(show) && !strings.HasPrefix(show, ".") {
		show = "." + string(filepath.Separator) + show
	}
	show = shellWord(show)
	fmt.Fprintf(w, "created %s plugin %q in %s: %s\n\nnext:\n", o.Lang, o.Name, show, strings.Join(names, ", "))
	var steps [][2]string
	if scaffold.IsGo(o.Lang) {
		if o.SDK == "" {
			steps = append(steps, [2]string{"$EDITOR " + show + "/go.mod", "point the replace line at a fledge checkout (the SDK is not published yet)"})
		}
		build := fmt.Sprintf("(cd %s && go mod tidy && go build -o bin/%s .)", show, o.Name)
		if o.Lang == "go-wasm" {
			build = fmt.Sprintf("(cd %s && go mod tidy && GOOS=wasip1 GOARCH=wasm go build -o bin/%s.wasm .)", show, o.Name)
		}
		steps = append(steps, [2]string{build, "fledge installs a copy: build first"})
	}
	steps = append(steps,
		[2]string{"fledge plugins install " + show + " --yes", "grants what plugin.toml declares: store"},
		[2]string{"fledge " + o.Name, "run it (--ni takes every default)"})
	width := 0
	for _, s := range steps {
		width = max(width, len(s[0]))
	}
	for _, s := range steps {
		fmt.Fprintf(w, "  %-*s  # %s\n", width, s[0], s[1])
	}
	return nil
}

// shellWord quotes s for the copy-and-paste commands printed as next steps.
func shellWord(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@%", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
