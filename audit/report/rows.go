// SPDX-License-Identifier: MIT

package report

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/fledgehq/fledge/audit"
)

// Row is one record as the page shows it, encoded as a JSON array (compact: a 100,000-record
// report carries 100,000 of them):
//
//	[seq, time (Unix ms), session, plugin, event, decision, reason, summary, duration ms,
//	 aggregate kind, aggregate key, details, plugin version]
//
// Every string a plugin could have chosen is Clip'd (visible controls, bounded length).
type Row struct {
	Seq      uint64
	TimeMS   int64
	Session  string
	Plugin   string
	Event    string
	Decision string
	Reason   string
	Summary  string
	// DurMS is how long the act the record ends took (exec_outcome, tool_outcome,
	// net_close, plugin_exit ...): the timeline draws a bar that long, ending at TimeMS.
	DurMS   int64
	AggKind string // "reached", "refused", "path" or ""
	AggKey  string
	Details any
	Version string
}

// Aggregate kinds: what a plugin reached, what it was refused, which paths it was refused.
const (
	AggReached = "reached"
	AggRefused = "refused"
	AggPath    = "path"
)

func (r *Row) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{r.Seq, r.TimeMS, r.Session, r.Plugin, r.Event, r.Decision, r.Reason,
		r.Summary, r.DurMS, r.AggKind, r.AggKey, r.Details, r.Version})
}

// NewRow builds the page's row of a record.
func NewRow(r *audit.Record) *Row {
	row := &Row{
		Seq: r.Seq, TimeMS: r.Time.UnixMilli(), Session: Clip(r.Session, 64),
		Event: Clip(r.Event, 64), Decision: Clip(string(r.Decision), 16), Reason: Clip(r.Reason, 64),
		Summary: Clip(summary(r), MaxSummaryBytes),
		Details: clipValue(detailsView(r), 0),
	}
	if r.Plugin != nil {
		row.Plugin, row.Version = Clip(r.Plugin.Name, 128), Clip(r.Plugin.Version, 64)
	}
	switch r.Event {
	case audit.EventExecOutcome, audit.EventToolOutcome, audit.EventHookOutcome, audit.EventNetClose,
		audit.EventPluginExit, audit.EventInvokeOutcome:
		if d, ok := num(r.Details[audit.DetailDurationMS]); ok && d > 0 {
			row.DurMS = d
		}
	}
	kind, key := classify(r)
	row.AggKind, row.AggKey = kind, Clip(key, MaxSummaryBytes)
	return row
}

// detailsView is what "details" shows: the record's details plus the fields the row does
// not already show.
func detailsView(r *audit.Record) map[string]any {
	m := map[string]any{}
	for k, v := range r.Details {
		m[k] = v
	}
	if r.Plugin != nil && (r.Plugin.Version != "" || r.Plugin.Source != "") {
		m["(plugin)"] = map[string]any{"version": r.Plugin.Version, "source": r.Plugin.Source, "manifest_digest": r.Plugin.ManifestDigest}
	}
	if r.Sandbox != nil {
		m["(sandbox)"] = map[string]any{"mode": r.Sandbox.Mode, "landlock_abi": r.Sandbox.LandlockABI, "cgroup_mode": r.Sandbox.CgroupMode}
	}
	m["(record)"] = map[string]any{"host": r.Host, "uid": r.UID, "pid": r.PID, "hash": r.Hash}
	return m
}

// clipValue bounds a details value for the page: strings Clip'd, lists and nesting cut.
func clipValue(v any, depth int) any {
	switch x := v.(type) {
	case string:
		return Clip(x, MaxDetailBytes)
	case map[string]any:
		if depth >= maxDepth {
			return fmt.Sprintf("…[clipped: object of %d keys]", len(x))
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[Clip(k, maxKeyBytes)] = clipValue(e, depth+1)
		}
		return out
	case []any:
		if depth >= maxDepth {
			return fmt.Sprintf("…[clipped: list of %d items]", len(x))
		}
		n := min(len(x), maxListItems)
		out := make([]any, 0, n+1)
		for _, e := range x[:n] {
			out = append(out, clipValue(e, depth+1))
		}
		if len(x) > n {
			out = append(out, fmt.Sprintf("…[clipped: %d more items]", len(x)-n))
		}
		return out
	case []string:
		a := make([]any, len(x))
		for i, s := range x {
			a[i] = s
		}
		return clipValue(a, depth)
	case json.Number, bool, nil, int, int64, uint64, float64:
		return x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return "…[unshowable]"
		}
		var back any
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.UseNumber()
		if d.Decode(&back) != nil {
			return "…[unshowable]"
		}
		return clipValue(back, depth)
	}
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return ""
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			parts = append(parts, str(e))
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprint(v)
}

func num(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			f, ferr := x.Float64()
			return int64(f), ferr == nil
		}
		return n, true
	case float64:
		return int64(x), true
	case int:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// dest is a network destination as the page names it: host:port, else address:port.
func dest(d map[string]any) string {
	host := str(d["host"])
	if host == "" {
		host = str(d["address"])
	}
	if p := str(d["port"]); p != "" && p != "0" && !strings.Contains(host, ":"+p) {
		return host + ":" + p
	}
	return host
}

// summary is a record's one line in the timeline.
func summary(r *audit.Record) string {
	d := r.Details
	join := func(parts ...string) string {
		var out []string
		for _, p := range parts {
			if p != "" {
				out = append(out, p)
			}
		}
		return strings.Join(out, "  ")
	}
	switch r.Event {
	case audit.EventPluginStart, audit.EventExecDecision:
		cmd := str(d[audit.DetailCommand])
		if r.Decision == audit.Deny && d[audit.DetailMessage] != nil {
			return join(cmd, str(d[audit.DetailMessage]))
		}
		return cmd
	case audit.EventExecOutcome, audit.EventPluginExit:
		s := ""
		if sig := str(d[audit.DetailSignal]); sig != "" {
			s = "signal " + sig
		} else if d[audit.DetailExitCode] != nil {
			s = "exit " + str(d[audit.DetailExitCode])
		}
		if b, _ := d[audit.DetailTimedOut].(bool); b {
			s += ", timed out"
		}
		if b, _ := d[audit.DetailOOMKilled].(bool); b {
			s += ", out of memory"
		}
		return s
	case audit.EventCwdRefused:
		return str(d[audit.DetailCwdRequested])
	case audit.EventNetConnect, audit.EventNetClose:
		s := dest(d)
		if a := str(d["address"]); a != "" && str(d["host"]) != "" {
			s += " (" + a + ")"
		}
		return join(s, str(d["why"]))
	case audit.EventNetDNS:
		return join(str(d["host"]), str(d["qtype"]), str(d["address"]), str(d["why"]))
	case audit.EventNetHTTP:
		return join(str(d["method"]), dest(d)+str(d["path"]), str(d["status"]), str(d["why"]))
	case audit.EventKernelDenied:
		return join(str(d[audit.DetailKind]), str(d[audit.DetailSyscall]), str(d[audit.DetailPath]),
			str(d[audit.DetailAddress]), str(d[audit.DetailAccess]), str(d[audit.DetailCommand]))
	case audit.EventToolCall, audit.EventToolOutcome:
		return join(str(d["tool"]), str(d["error"]))
	case audit.EventHookCall, audit.EventHookOutcome:
		return join(str(d["hook"]), str(d["action"]))
	case audit.EventGrant, audit.EventRevoke, audit.EventInstall:
		if c := str(d[audit.DetailCapability]); c != "" {
			return c
		}
		return str(d[audit.DetailCapabilities])
	case audit.EventStore, audit.EventLoad:
		return str(d[audit.DetailKey])
	case audit.EventLimit:
		return join(str(d[audit.DetailLimit]), str(d[audit.DetailLimitValue]))
	case audit.EventGitQuarantine:
		return join(str(d[audit.DetailPath]), str(d["moved_to"]))
	}
	if m := str(d[audit.DetailMessage]); m != "" {
		return m
	}
	return ""
}

// classify says what a record adds to its plugin's destinations and refused paths.
func classify(r *audit.Record) (kind, key string) {
	d := r.Details
	switch r.Event {
	case audit.EventNetConnect:
		if r.Decision == audit.Allow {
			return AggReached, dest(d)
		}
		if r.Decision == audit.Deny {
			return AggRefused, dest(d)
		}
	case audit.EventNetHTTP:
		if r.Decision == audit.Deny {
			return AggRefused, dest(d)
		}
	case audit.EventNetDNS:
		if r.Decision == audit.Deny {
			return AggRefused, str(d["host"]) + " (DNS)"
		}
	case audit.EventCwdRefused:
		return AggPath, str(d[audit.DetailCwdRequested])
	case audit.EventKernelDenied:
		switch {
		case str(d[audit.DetailAddress]) != "":
			return AggRefused, str(d[audit.DetailAddress]) + " (kernel)"
		case str(d[audit.DetailPath]) != "":
			return AggPath, str(d[audit.DetailPath])
		}
	}
	return "", ""
}

// maxAggKeys bounds the distinct destinations or paths kept per plugin and kind; the rest
// are counted.
const maxAggKeys = 500

// PluginAgg is one plugin's destinations reached and refused and paths refused.
type PluginAgg struct {
	Plugin string            `json:"plugin"`
	Lists  map[string]*Tally `json:"lists"`
}

// Tally counts records per key, for at most maxAggKeys keys.
type Tally struct {
	Counts map[string]int `json:"counts"`
	// More counts records whose key was past the bound.
	More int `json:"more"`
}

type aggregates map[string]*PluginAgg

func (a aggregates) add(row *Row) {
	if row.AggKind == "" {
		return
	}
	p := a[row.Plugin]
	if p == nil {
		p = &PluginAgg{Plugin: row.Plugin, Lists: map[string]*Tally{}}
		a[row.Plugin] = p
	}
	t := p.Lists[row.AggKind]
	if t == nil {
		t = &Tally{Counts: map[string]int{}}
		p.Lists[row.AggKind] = t
	}
	if _, ok := t.Counts[row.AggKey]; ok || len(t.Counts) < maxAggKeys {
		t.Counts[row.AggKey]++
	} else {
		t.More++
	}
}

func (a aggregates) list() []*PluginAgg {
	out := make([]*PluginAgg, 0, len(a))
	for _, p := range a {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Plugin < out[j].Plugin })
	return out
}
