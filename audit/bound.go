// SPDX-License-Identifier: MIT

package audit

import (
	"fmt"
	"sort"

	"github.com/fledgehq/fledge/ui/clip"
)

// Field bounds: every value a caller puts in a record (most of them chosen by a plugin: a
// command line, storage keys, metadata keys, tool names) is bounded here, in the one writer,
// rather than by each protocol adapter. A cut string keeps its prefix and says how long it
// was and what it hashed to, so an auditor holding the plugin's input can still match it.
const (
	// DefaultMaxFieldBytes bounds one string of a record (a detail value, a map key, a
	// plugin or session name).
	DefaultMaxFieldBytes = 4096
	// MinFieldBytes is the smallest MaxFieldBytes accepted.
	MinFieldBytes = 256
	// DefaultMaxListItems bounds the items of one list, and the keys of one object, in details.
	DefaultMaxListItems = 64
	// maxDetailsStringBytes bounds the bytes of all strings of one record's details together:
	// past it, strings keep no prefix, only the marker (64 keys of 4 KiB: 16 KiB, not 256).
	maxDetailsStringBytes = 16 << 10
	// maxDetailsNodes bounds the values (strings, numbers, lists, objects) of one record's
	// details, so nested lists cannot multiply the per-list bound.
	maxDetailsNodes = 512
	// maxDetailsDepth bounds nesting in details.
	maxDetailsDepth = 8
)

// DetailFieldsTruncated is set on a record whose details had values cut by the field bounds:
// how many strings, lists or objects were cut.
const DetailFieldsTruncated = "fields_truncated"

// TruncatedMarker starts the marker appended to a cut string:
// "<prefix>…[truncated: <original bytes> bytes, sha256 <64 hex>]".
const TruncatedMarker = "…[truncated: "

type bounder struct {
	field, items int
	strBudget    int
	nodes        int
	cuts         int
}

func newBounder(field, items int) *bounder {
	return &bounder{field: field, items: items, strBudget: maxDetailsStringBytes, nodes: maxDetailsNodes}
}

// str cuts s to the field bound (and what is left of the record's string budget).
func (b *bounder) str(s string) string {
	limit := min(b.field, max(b.strBudget, 0))
	if len(s) <= limit {
		b.strBudget -= len(s)
		return s
	}
	b.cuts++
	keep := clip.Prefix(s, limit)
	b.strBudget -= len(keep)
	return keep + fmt.Sprintf("%s%d bytes, sha256 %s]", TruncatedMarker, len(s), hashOf([]byte(s)))
}

// value bounds one normalised details value (string, json.Number, bool, nil, []any,
// map[string]any).
func (b *bounder) value(v any, depth int) any {
	b.nodes--
	switch x := v.(type) {
	case string:
		return b.str(x)
	case []any:
		if depth >= maxDetailsDepth {
			b.cuts++
			return fmt.Sprintf("%snested deeper than %d, %d items]", TruncatedMarker, maxDetailsDepth, len(x))
		}
		keep := min(len(x), b.items, max(b.nodes, 0))
		out := make([]any, 0, keep+1)
		for _, e := range x[:keep] {
			out = append(out, b.value(e, depth+1))
		}
		if keep < len(x) {
			b.cuts++
			out = append(out, fmt.Sprintf("%s%d more items, %d in all]", TruncatedMarker, len(x)-keep, len(x)))
		}
		return out
	case map[string]any:
		if depth >= maxDetailsDepth {
			b.cuts++
			return fmt.Sprintf("%snested deeper than %d, %d keys]", TruncatedMarker, maxDetailsDepth, len(x))
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		keep := min(len(keys), b.items, max(b.nodes, 0))
		out := make(map[string]any, keep+1)
		for _, k := range keys[:keep] {
			// A cut key carries its own hash, so two long keys cannot collide.
			out[b.str(k)] = b.value(x[k], depth+1)
		}
		if keep < len(keys) {
			b.cuts++
			out[TruncatedMarker+"more keys]"] = fmt.Sprintf("%d more keys, %d in all", len(keys)-keep, len(keys))
		}
		return out
	}
	return v
}

// boundRecord applies the field bounds to a normalised record in place and reports whether
// anything was cut.
func boundRecord(n *Record, field, items int) bool {
	b := newBounder(field, items)
	cut := func(s *string) {
		if len(*s) > field {
			*s = b.str(*s)
		}
	}
	cut(&n.Session)
	cut(&n.Event)
	cut(&n.Reason)
	cut((*string)(&n.Decision))
	cut(&n.Host)
	if n.Plugin != nil {
		p := *n.Plugin
		cut(&p.Name)
		cut(&p.Version)
		cut(&p.Source)
		cut(&p.ManifestDigest)
		n.Plugin = &p
	}
	if n.Sandbox != nil {
		s := *n.Sandbox
		cut(&s.Mode)
		cut(&s.CgroupMode)
		n.Sandbox = &s
	}
	top := b.cuts
	if n.Details != nil {
		d, _ := b.value(n.Details, 0).(map[string]any)
		if b.cuts > top {
			d[DetailFieldsTruncated] = b.cuts - top
		}
		n.Details = d
	}
	return b.cuts > 0
}
