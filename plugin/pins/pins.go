// SPDX-License-Identifier: MIT

// Package pins keeps the tool definitions a user approved for each plugin that describes
// its own tools (MCP servers, JSON-RPC 2.0 plugins): a hash of each tool's name, description
// and input schema, and of the server's instructions. A later listing that differs (a "rug
// pull": a new description telling the model to read ~/.ssh) is not trusted: the changed or
// new tools are quarantined until the user reviews and approves them.
//
// The pins live in <config>/pins/<plugin>.json, host-owned (a plugin's sandbox never sees
// the config dir), written atomically. The first listing of a plugin pins what it lists
// (trust on first use: `plugins install npm:` lists, and so pins, at install).
package pins

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/fledgehq/fledge/ui"
	"github.com/fledgehq/fledge/ui/clip"
)

// Dir is where pins live inside the config dir.
const Dir = "pins"

// Bounds: what one pin file may hold and how much of a definition is kept for review (the
// hash always covers the whole definition).
const (
	MaxFileBytes    = 8 << 20
	MaxTools        = 1024
	maxKeptDesc     = 4096
	maxKeptSchema   = 16 << 10
	InstructionsKey = "(instructions)"
)

var (
	// ErrCorrupt: a pin file cannot be read; it is never replaced silently (it records
	// what the user approved), so every tool of the plugin is quarantined until approve.
	ErrCorrupt = errors.New("pin file is unreadable")
	// ErrNothingPending: approve found nothing to approve.
	ErrNothingPending = errors.New("no changed tool definitions to approve")
)

// Def is one tool definition as a plugin listed it.
type Def struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// HashText pins a text (the server's instructions) by its words (see Words).
func HashText(s string) string {
	sum := sha256.Sum256([]byte(Words(s)))
	return canonPrefix + hex.EncodeToString(sum[:])
}

// legacyHashText is HashText before canonical hashing (only read; see legacyHash).
func legacyHashText(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Pin is one approved (or pending) definition: its hash and what is kept for review.
type Pin struct {
	Hash string `json:"hash"`
	// Removed marks a pending entry for an approved tool the server no longer lists.
	Removed     bool            `json:"removed,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// File is one plugin's pins.
type File struct {
	Plugin string `json:"plugin"`
	// Tools are the approved definitions by tool name; InstructionsKey is the server's
	// instructions.
	Tools map[string]Pin `json:"tools"`
	// Pending are the definitions seen since that differ from (or are missing in) Tools.
	Pending map[string]Pin `json:"pending,omitempty"`
}

// Change is one quarantined definition: Old is "" for a tool never approved.
type Change struct {
	Tool     string `json:"tool"`
	Old      string `json:"old_hash,omitempty"`
	New      string `json:"new_hash"`
	OldDesc  string `json:"old_description,omitempty"`
	NewDesc  string `json:"new_description,omitempty"`
	OldInput string `json:"old_input_schema,omitempty"`
	NewInput string `json:"new_input_schema,omitempty"`
	// Removed: an approved tool the server no longer lists (nothing to hold back; review
	// shows it, approve forgets its pin).
	Removed bool `json:"removed,omitempty"`
	// Fresh: seen for the first time now (or different from the last pending one): the
	// caller records it once, not at every listing.
	Fresh bool `json:"-"`
}

// Verdict is a listing checked against the pins.
type Verdict struct {
	// Quarantined are the tools not to offer, by name, and why.
	Quarantined map[string]Change
	// FirstUse: there were no pins; everything listed was pinned now.
	FirstUse bool
	// Removed are the approved tools the listing no longer has, by name.
	Removed []string
}

// Allowed reports whether the tool may be offered.
func (v *Verdict) Allowed(tool string) bool { _, q := v.Quarantined[tool]; return !q }

// Changes are the quarantined definitions, by tool name.
func (v *Verdict) Changes() []Change {
	out := make([]Change, 0, len(v.Quarantined))
	for _, c := range v.Quarantined {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tool < out[j].Tool })
	return out
}

func path(configDir, plugin string) string {
	return filepath.Join(configDir, Dir, plugin+".json")
}

// Path is the file a plugin's pins are kept in (its stamp says whether they changed).
func Path(configDir, plugin string) string { return path(configDir, plugin) }

// Load reads a plugin's pins; (nil, nil) when it has none yet.
func Load(configDir, plugin string) (*File, error) {
	data, _, err := loadRaw(configDir, plugin)
	if data == nil || err != nil {
		return nil, err
	}
	return parse(data, plugin, path(configDir, plugin))
}

// loadRaw reads a plugin's pin file and returns it with the fstat taken before it was read;
// (nil, nil, nil) when it has none yet.
func loadRaw(configDir, plugin string) ([]byte, os.FileInfo, error) {
	f, err := os.OpenFile(path(configDir, plugin), os.O_RDONLY|oNoFollow|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%w: %s is not a regular file", ErrCorrupt, f.Name())
	}
	fileReads.Add(1)
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil || len(data) > MaxFileBytes {
		return nil, nil, fmt.Errorf("%w: %s is too large or unreadable", ErrCorrupt, f.Name())
	}
	return data, st, nil
}

func parse(data []byte, plugin, name string) (*File, error) {
	var pf File
	if err := json.Unmarshal(data, &pf); err != nil || pf.Plugin != plugin {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	if pf.Tools == nil {
		pf.Tools = map[string]Pin{}
	}
	return &pf, nil
}

// Save writes the pins atomically (0600; never through a symlink planted at the path).
func Save(configDir string, pf *File) error {
	dir := filepath.Join(configDir, Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(pf, "", "  ")
	if err != nil {
		return err
	}
	if len(data) > MaxFileBytes {
		return fmt.Errorf("pins of %s: more than %d bytes", pf.Plugin, MaxFileBytes)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+pf.Plugin+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(append(data, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path(configDir, pf.Plugin))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Remove forgets a plugin's pins (plugins remove; update re-pins from scratch).
func Remove(configDir, plugin string) error {
	err := os.Remove(path(configDir, plugin))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func keep(d Def) Pin {
	// The hash covers the definition as given; what is kept is for a terminal to show.
	p := Pin{Hash: Hash(d), Description: ui.Clip(ui.PlainText(d.Description), maxKeptDesc)}
	if len(d.InputSchema) <= maxKeptSchema {
		var buf bytes.Buffer
		if json.Compact(&buf, d.InputSchema) == nil {
			p.InputSchema = buf.Bytes()
		}
	}
	return p
}

// Check compares a listing (and the server's instructions, "" when it gives none) with a
// plugin's pins. Without pins, everything is pinned (first use). A changed or new tool is
// quarantined and kept as pending for review; changed instructions quarantine every tool of
// the plugin (they speak to the model about all of them). Pending entries are saved when
// they change, so Change.Fresh is true once per difference.
func Check(configDir, plugin, instructions string, defs []Def) (*Verdict, error) {
	v := &Verdict{Quarantined: map[string]Change{}}
	over := len(defs) > MaxTools
	if over {
		// Past the bound nothing is pinned or kept, so nothing there may be trusted: those
		// tools are held back (and never offered), not let through unchecked.
		for _, d := range defs[MaxTools:] {
			v.Quarantined[d.Name] = Change{Tool: d.Name, New: Hash(d), NewDesc: clip.Bytes(d.Description, maxKeptDesc)}
		}
		defs = defs[:MaxTools]
	}
	if mv := memoGetStamped(configDir, plugin, instructions, defs, over); mv != nil {
		return mv, nil
	}
	data, fi, err := loadRaw(configDir, plugin)
	var pf *File
	if err == nil && data != nil {
		if mv := memoGet(configDir, plugin, data, instructions, defs, over); mv != nil {
			memoVouch(configDir, plugin, data, fi)
			return mv, nil
		}
		pf, err = parse(data, plugin, path(configDir, plugin))
	}
	if err != nil {
		// What the user approved cannot be read: nothing is trusted.
		for _, d := range defs {
			v.Quarantined[d.Name] = Change{Tool: d.Name, New: Hash(d), NewDesc: d.Description}
		}
		return v, err
	}
	if pf == nil {
		pf = &File{Plugin: plugin, Tools: map[string]Pin{}}
		for _, d := range defs {
			pf.Tools[d.Name] = keep(d)
		}
		if instructions != "" {
			pf.Tools[InstructionsKey] = Pin{Hash: HashText(instructions), Description: clip.Bytes(instructions, maxKeptDesc)}
		}
		v.FirstUse = true
		return v, Save(configDir, pf)
	}
	dirty := false
	pending := map[string]Pin{}
	note := func(name string, now Pin) Change {
		old, had := pf.Tools[name]
		c := Change{Tool: name, New: now.Hash, NewDesc: now.Description, NewInput: string(now.InputSchema), Removed: now.Removed}
		if had {
			c.Old, c.OldDesc, c.OldInput = old.Hash, old.Description, string(old.InputSchema)
		}
		if prev, ok := pf.Pending[name]; !ok || prev.Hash != now.Hash || prev.Removed != now.Removed {
			c.Fresh, dirty = true, true
		}
		pending[name] = now
		return c
	}
	var instrChange *Change
	old := pf.Tools[InstructionsKey].Hash
	instrPin := Pin{Hash: HashText(instructions), Description: clip.Bytes(instructions, maxKeptDesc)}
	if kept := pf.Tools[InstructionsKey]; isLegacy(old) && (old == legacyHashText(instructions) ||
		legacyHashText(kept.Description) == old && HashText(kept.Description) == instrPin.Hash) {
		pf.Tools[InstructionsKey], old, dirty = instrPin, instrPin.Hash, true // pinned before canonical hashing
	}
	if now := instrPin.Hash; (instructions != "" || old != "") && now != old {
		c := note(InstructionsKey, instrPin)
		instrChange = &c
	}
	listed := make(map[string]bool, len(defs))
	for _, d := range defs {
		listed[d.Name] = true
		now := keep(d)
		if p, ok := pf.Tools[d.Name]; ok && p.Hash != now.Hash && sameLegacy(p, d, now) {
			// Pinned before canonical hashing, and the same definition: the pin is rewritten
			// in the canonical form, nothing is quarantined.
			pf.Tools[d.Name], dirty = now, true
		}
		if p, ok := pf.Pending[d.Name]; ok && p.Hash != now.Hash && sameLegacy(p, d, now) {
			// Held back before the upgrade and still the same: not a fresh difference.
			pf.Pending[d.Name] = now
		}
		if p, ok := pf.Tools[d.Name]; ok && p.Hash == now.Hash && instrChange == nil {
			continue
		}
		if p, ok := pf.Tools[d.Name]; ok && p.Hash == now.Hash {
			// Unchanged itself, held back by the instructions.
			c := *instrChange
			c.Fresh = false // Tool stays InstructionsKey: the reason it is held back
			v.Quarantined[d.Name] = c
			continue
		}
		v.Quarantined[d.Name] = note(d.Name, now)
	}
	if instrChange != nil {
		v.Quarantined[InstructionsKey] = *instrChange
	}
	if !over {
		for name := range pf.Tools {
			if name != InstructionsKey && !listed[name] {
				v.Removed = append(v.Removed, name)
				note(name, Pin{Removed: true})
			}
		}
		sort.Strings(v.Removed)
	}
	if len(pending) != len(pf.Pending) {
		dirty = true
	}
	if dirty {
		pf.Pending = pending
		if len(pending) == 0 {
			pf.Pending = nil
		}
		if err := Save(configDir, pf); err != nil {
			return v, err
		}
		return v, nil
	}
	// Nothing was written: the verdict follows from these inputs alone.
	if !over {
		memoPut(configDir, plugin, data, fi, instructions, defs, v)
	}
	return v, nil
}

// Review lists what approve would accept, by tool name.
func Review(configDir, plugin string) ([]Change, error) {
	pf, err := Load(configDir, plugin)
	if err != nil || pf == nil {
		return nil, err
	}
	var out []Change
	for name, now := range pf.Pending {
		c := Change{Tool: name, New: now.Hash, NewDesc: now.Description, NewInput: string(now.InputSchema), Removed: now.Removed}
		if old, ok := pf.Tools[name]; ok {
			c.Old, c.OldDesc, c.OldInput = old.Hash, old.Description, string(old.InputSchema)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tool < out[j].Tool })
	return out, nil
}

// Approve accepts every pending definition (as last seen) and returns them. A corrupt pin
// file is replaced by nothing: the next listing pins afresh (the user asked to trust it).
func Approve(configDir, plugin string) ([]Change, error) {
	pf, err := Load(configDir, plugin)
	if errors.Is(err, ErrCorrupt) {
		if rerr := Remove(configDir, plugin); rerr != nil {
			return nil, rerr
		}
		return []Change{{Tool: "(all)", New: "re-pinned at the next listing"}}, nil
	}
	if err != nil {
		return nil, err
	}
	changes, err := Review(configDir, plugin)
	if err != nil {
		return nil, err
	}
	if pf == nil || len(pf.Pending) == 0 {
		return nil, fmt.Errorf("%w for %s", ErrNothingPending, plugin)
	}
	for name, p := range pf.Pending {
		if p.Removed {
			delete(pf.Tools, name)
			continue
		}
		pf.Tools[name] = p
	}
	pf.Pending = nil
	return changes, Save(configDir, pf)
}

// Diff renders one change for a terminal: what it means first (Meaning, "*" lines), then
// the old and new description and schema, line by line, "-" for what went and "+" for what
// came.
func Diff(c Change) string {
	var b strings.Builder
	switch {
	case c.Removed:
		fmt.Fprintf(&b, "removed %s (%s)\n", c.Tool, c.Old)
		return b.String()
	case c.Old == "":
		fmt.Fprintf(&b, "new tool %s (%s)\n", c.Tool, c.New)
	default:
		fmt.Fprintf(&b, "changed %s: %s -> %s\n", c.Tool, c.Old, c.New)
	}
	// What it means first; the definitions as kept, line by line, after.
	for _, m := range Meaning(c) {
		fmt.Fprintf(&b, "  * %s\n", m)
	}
	lines := func(prefix, label, s string) {
		if s == "" {
			return
		}
		for _, l := range strings.Split(s, "\n") {
			fmt.Fprintf(&b, "  %s %s: %s\n", prefix, label, l)
		}
	}
	if c.OldDesc != c.NewDesc {
		lines("-", "description", c.OldDesc)
		lines("+", "description", c.NewDesc)
	}
	if c.OldInput != c.NewInput {
		lines("-", "input_schema", c.OldInput)
		lines("+", "input_schema", c.NewInput)
	}
	return b.String()
}
