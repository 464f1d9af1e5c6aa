// SPDX-License-Identifier: MIT

package audit

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Format is an output format of `fledge audit show`.
type Format string

const (
	FormatText Format = "text" // the sanitised table (TableWriter)
	FormatJSON Format = "json" // the lines exactly as stored
	FormatOCSF Format = "ocsf" // OCSF Process Activity (class 1007), one object per line
	FormatECS  Format = "ecs"  // Elastic Common Schema, one object per line
)

// Formats lists every Format, in the order the CLI documents them.
var Formats = []Format{FormatText, FormatJSON, FormatOCSF, FormatECS}

// ErrUnknownFormat is returned by ParseFormat for a name that is not in Formats.
var ErrUnknownFormat = errors.New("audit: unknown output format")

// ParseFormat returns the Format named s.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return "", fmt.Errorf("%w %q (want %s)", ErrUnknownFormat, s, strings.Join(names, ", "))
}

// Versions of the schemas the mappings follow (docs/audit.md, "Shipping the log").
const (
	OCSFVersion = "1.3.0"
	ECSVersion  = "8.11.0"
)

// ExportOptions are what a mapping needs besides the record.
type ExportOptions struct {
	// ProductVersion is fledge's version, for OCSF metadata.product.version and ECS
	// agent.version; empty leaves it out.
	ProductVersion string
}

// RecordWriter writes records one at a time in some format.
type RecordWriter interface {
	Write(r *Record) error
}

// NewRecordWriter returns a writer of records to w in format f: the sanitised table for
// text, the stored lines for json, one OCSF or ECS JSON object per line for ocsf and ecs.
func NewRecordWriter(w io.Writer, f Format, o ExportOptions) (RecordWriter, error) {
	switch f {
	case FormatText:
		return NewTableWriter(w), nil
	case FormatJSON:
		return jsonLineWriter{w}, nil
	case FormatOCSF:
		return mappedWriter{w, func(r *Record) map[string]any { return OCSF(r, o) }}, nil
	case FormatECS:
		return mappedWriter{w, func(r *Record) map[string]any { return ECS(r, o) }}, nil
	}
	_, err := ParseFormat(string(f))
	return nil, err
}

type jsonLineWriter struct{ w io.Writer }

func (j jsonLineWriter) Write(r *Record) error {
	b, err := JSONLine(r)
	if err != nil {
		return err
	}
	_, err = j.w.Write(append(b, '\n'))
	return err
}

type mappedWriter struct {
	w   io.Writer
	fun func(*Record) map[string]any
}

func (m mappedWriter) Write(r *Record) error {
	// Sorted keys, no HTML escaping, one line: collectors read it as is.
	b, err := marshalCompact(m.fun(r))
	if err != nil {
		return fmt.Errorf("audit: encode seq %d: %w", r.Seq, err)
	}
	_, err = m.w.Write(append(b, '\n'))
	return err
}

// Activity of an OCSF Process Activity event.
const (
	ocsfLaunch    = 1
	ocsfTerminate = 2
	ocsfOther     = 99
)

func ocsfActivity(event string) (int, string) {
	switch event {
	case EventExecDecision, EventPluginStart:
		return ocsfLaunch, "Launch"
	case EventExecOutcome, EventPluginExit:
		return ocsfTerminate, "Terminate"
	}
	return ocsfOther, event
}

// OCSF maps r to an OCSF Process Activity event (class_uid 1007), as docs/audit.md says.
// Every record maps to that class: the four process events as Launch or Terminate, the
// others as activity 99 (Other) named by the fledge event, which metadata.event_code
// always carries. Whatever OCSF has no attribute for is kept under unmapped.
func OCSF(r *Record, o ExportOptions) map[string]any {
	act, actName := ocsfActivity(r.Event)
	out := map[string]any{
		"class_uid":      1007,
		"class_name":     "Process Activity",
		"category_uid":   1,
		"category_name":  "System Activity",
		"activity_id":    act,
		"activity_name":  actName,
		"type_uid":       100700 + act,
		"type_name":      "Process Activity: " + actName,
		"time":           r.Time.UnixMilli(),
		"status_code":    r.Reason,
		"status_detail":  r.Reason,
		"message":        ocsfMessage(r),
		"device":         map[string]any{"hostname": r.Host, "type_id": 0, "type": "Unknown"},
		"actor":          ocsfActor(r),
		"process":        ocsfProcess(r),
		"metadata":       ocsfMetadata(r, o),
		"unmapped":       unmapped(r),
		"severity_id":    1,
		"severity":       "Informational",
		"action_id":      0,
		"action":         "Unknown",
		"disposition_id": 0,
		"disposition":    "Unknown",
		"status_id":      2,
		"status":         "Failure",
	}
	switch r.Decision {
	case Allow:
		out["action_id"], out["action"] = 1, "Allowed"
		out["disposition_id"], out["disposition"] = 1, "Allowed"
		out["status_id"], out["status"] = 1, "Success"
	case Deny:
		out["action_id"], out["action"] = 2, "Denied"
		out["disposition_id"], out["disposition"] = 2, "Blocked"
		out["severity_id"], out["severity"] = 3, "Medium"
	case Error:
		out["severity_id"], out["severity"] = 4, "High"
	}
	if m, ok := r.Details[DetailMessage].(string); ok && m != "" {
		out["status_detail"] = m
	}
	if v, ok := r.Details[DetailExitCode]; ok {
		out["exit_code"] = v
	}
	if ms, ok := detailInt(r.Details[DetailDurationMS]); ok {
		out["duration"] = ms
	}
	ocsfNetwork(r, out) // export_net.go
	return out
}

// ocsfMessage is a one-line human description: event, decision, reason, plugin.
func ocsfMessage(r *Record) string {
	s := fmt.Sprintf("%s %s (%s)", r.Event, r.Decision, r.Reason)
	if r.Plugin != nil {
		s += " plugin " + pluginID(r.Plugin)
	}
	return s
}

func pluginID(p *PluginRef) string {
	if p.Version == "" {
		return p.Name
	}
	return p.Name + "@" + p.Version
}

// ocsfActor is fledge itself: the process that made the decision, its user, and the
// plugin on whose behalf it acted.
func ocsfActor(r *Record) map[string]any {
	a := map[string]any{
		"process": map[string]any{"pid": r.PID, "name": "fledge"},
		"user":    map[string]any{"uid": strconv.Itoa(r.UID)},
	}
	if r.Plugin != nil {
		a["app_name"] = pluginID(r.Plugin)
	}
	return a
}

// ocsfProcess is the process the activity is about: the command (exec events), the plugin
// process (plugin and request events), or fledge itself when no plugin is involved.
func ocsfProcess(r *Record) map[string]any {
	p := map[string]any{}
	cmd, argv := commandLine(r)
	if cmd != "" {
		p["cmd_line"] = cmd
	}
	if name := processName(r, argv); name != "" {
		p["name"] = name
	}
	if len(p) == 0 {
		return map[string]any{"name": "fledge", "pid": r.PID}
	}
	if pid, ok := detailInt(r.Details["plugin_pid"]); ok && isPluginEvent(r.Event) {
		p["pid"] = pid
	}
	// OCSF wants a pid or a uid. An exec is recorded before it has a pid, and a plugin's
	// records do not all know it: the uid names the process within fledge's log instead:
	// session/seq for an exec, the session for the plugin process (one per session),
	// plugin:<name> for records outside a session.
	switch {
	case isExecEvent(r.Event) || r.Event == EventCwdRefused:
		p["uid"] = r.Session + "/" + strconv.FormatUint(r.Seq, 10)
	case r.Session != "":
		p["uid"] = r.Session
	case r.Plugin != nil:
		p["uid"] = "plugin:" + r.Plugin.Name // install, grant, remove: the plugin itself
	default:
		p["uid"] = strconv.FormatUint(r.Seq, 10)
	}
	return p
}

func ocsfMetadata(r *Record, o ExportOptions) map[string]any {
	product := map[string]any{"name": "fledge", "vendor_name": "fledge"}
	if o.ProductVersion != "" {
		product["version"] = o.ProductVersion
	}
	m := map[string]any{
		"version":    OCSFVersion,
		"product":    product,
		"uid":        r.Hash,
		"sequence":   r.Seq,
		"event_code": r.Event,
		"log_name":   "fledge audit",
	}
	if r.Session != "" {
		m["correlation_uid"] = r.Session
	}
	return m
}

// unmapped keeps what neither schema has a field for, including what re-verifying the chain
// downstream needs (prev_hash; hash is metadata.uid / event.hash).
func unmapped(r *Record) map[string]any {
	u := map[string]any{"schema": r.Schema, "prev_hash": r.PrevHash, "decision": string(r.Decision)}
	if r.Plugin != nil {
		if r.Plugin.Source != "" {
			u["plugin_source"] = r.Plugin.Source
		}
		if r.Plugin.ManifestDigest != "" {
			u["plugin_manifest_digest"] = r.Plugin.ManifestDigest
		}
	}
	if r.Sandbox != nil {
		u["sandbox"] = r.Sandbox
	}
	if r.ManagedPolicy != "" {
		u["managed_policy"] = r.ManagedPolicy
	}
	if len(r.Details) > 0 {
		u["details"] = r.Details
	}
	return u
}

func isExecEvent(e string) bool   { return e == EventExecDecision || e == EventExecOutcome }
func isPluginEvent(e string) bool { return e == EventPluginStart || e == EventPluginExit }

// commandLine is what ran or was asked to run, where the record knows it: an exec's
// command line as the plugin sent it, or a plugin's argument vector joined.
func commandLine(r *Record) (string, []string) {
	argv := stringList(r.Details[DetailArgv])
	cmd, _ := r.Details[DetailCommand].(string)
	switch {
	case isExecEvent(r.Event) || r.Event == EventCwdRefused:
		return cmd, argv
	case len(argv) > 0:
		return strings.Join(argv, " "), argv
	}
	// A plugin event's "command" is the fledge command name, not a command line.
	return "", argv
}

// processName is the executable's base name (argv[0], or the plugin program), else the
// plugin's name for records about requests a plugin made.
func processName(r *Record, argv []string) string {
	if len(argv) > 0 {
		return baseName(argv[0])
	}
	if prog, ok := r.Details["program"].(string); ok && prog != "" {
		return baseName(prog)
	}
	if r.Plugin != nil && !isExecEvent(r.Event) {
		return r.Plugin.Name
	}
	return ""
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 && i < len(p)-1 {
		return p[i+1:]
	}
	return p
}

func stringList(v any) []string {
	switch x := v.(type) {
	case []string:
		return x
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil
			}
			out = append(out, s)
		}
		return out
	}
	return nil
}

// ecsCategory is the ECS event.category and the event.type of an allowed record.
func ecsCategory(event string) ([]string, []string) {
	switch event {
	case EventExecDecision, EventPluginStart:
		return []string{"process"}, []string{"start", "allowed"}
	case EventExecOutcome, EventPluginExit:
		return []string{"process"}, []string{"end"}
	case EventInstall:
		return []string{"package"}, []string{"installation"}
	case EventRemove:
		return []string{"package"}, []string{"deletion"}
	case EventGrant, EventRevoke:
		return []string{"package", "iam"}, []string{"change"}
	}
	return []string{"process"}, []string{"info"}
}

// ECS maps r to an Elastic Common Schema document, as docs/audit.md says: process events
// under process.*, install/remove/grant under package.*, every record named by
// event.action = the fledge event, and the whole record under fledge.* for what ECS has no
// field for.
func ECS(r *Record, o ExportOptions) map[string]any {
	cat, typ := ecsCategory(r.Event)
	outcome := "unknown"
	switch r.Decision {
	case Allow:
		outcome = "success"
	case Deny:
		outcome = "failure"
		typ = []string{"denied"}
	}
	ev := map[string]any{
		"kind":     "event",
		"category": cat,
		"type":     typ,
		"action":   r.Event,
		"outcome":  outcome,
		"reason":   r.Reason,
		"sequence": r.Seq,
		"hash":     r.Hash,
		"provider": "fledge",
		"module":   "fledge",
		"dataset":  "fledge.audit",
	}
	if ms, ok := detailInt(r.Details[DetailDurationMS]); ok {
		ev["duration"] = ms * 1_000_000
	}
	out := map[string]any{
		"@timestamp": r.Time.Format("2006-01-02T15:04:05.999999999Z07:00"),
		"ecs":        map[string]any{"version": ECSVersion},
		"event":      ev,
		"message":    ocsfMessage(r),
		"user":       map[string]any{"id": strconv.Itoa(r.UID)},
		"host":       map[string]any{"hostname": r.Host},
		"fledge":     ecsFledge(r),
	}
	agent := map[string]any{"name": "fledge", "type": "fledge"}
	if o.ProductVersion != "" {
		agent["version"] = o.ProductVersion
	}
	out["agent"] = agent
	if p := ecsProcess(r); len(p) > 0 {
		out["process"] = p
	}
	if r.Plugin != nil {
		pkg := map[string]any{"name": r.Plugin.Name}
		if r.Plugin.Version != "" {
			pkg["version"] = r.Plugin.Version
		}
		if r.Plugin.Source != "" {
			pkg["path"] = r.Plugin.Source
		}
		out["package"] = pkg
	}
	labels := map[string]any{"fledge_prev_hash": r.PrevHash}
	if r.Session != "" {
		labels["fledge_session"] = r.Session
	}
	out["labels"] = labels
	return out
}

// ecsProcess: the command or plugin process, with fledge as its parent.
func ecsProcess(r *Record) map[string]any {
	p := map[string]any{}
	cmd, argv := commandLine(r)
	if cmd != "" {
		p["command_line"] = cmd
	}
	if len(argv) > 0 {
		p["args"] = argv
		p["args_count"] = len(argv)
	}
	if name := processName(r, argv); name != "" {
		p["name"] = name
	}
	if prog, ok := r.Details["program"].(string); ok && prog != "" && isPluginEvent(r.Event) {
		p["executable"] = prog
	}
	if cwd, ok := r.Details[DetailCwdResolved].(string); ok && cwd != "" {
		p["working_directory"] = cwd
	}
	if v, ok := r.Details[DetailExitCode]; ok {
		p["exit_code"] = v
	}
	if pid, ok := detailInt(r.Details["plugin_pid"]); ok && isPluginEvent(r.Event) {
		p["pid"] = pid
	}
	if len(p) == 0 {
		// No command and no plugin process: the record is about fledge itself.
		return map[string]any{"name": "fledge", "pid": r.PID}
	}
	p["parent"] = map[string]any{"pid": r.PID, "name": "fledge"}
	return p
}

// ecsFledge is the record as stored, minus what ECS fields already carry verbatim, so the
// custom fledge.* namespace holds everything else (sandbox, details, plugin provenance).
func ecsFledge(r *Record) map[string]any {
	f := map[string]any{"schema": r.Schema, "decision": string(r.Decision), "pid": r.PID}
	if r.Session != "" {
		f["session"] = r.Session
	}
	if r.Plugin != nil {
		f["plugin"] = r.Plugin
	}
	if r.Sandbox != nil {
		f["sandbox"] = r.Sandbox
	}
	if r.ManagedPolicy != "" {
		f["managed_policy"] = r.ManagedPolicy
	}
	if len(r.Details) > 0 {
		f["details"] = r.Details
	}
	return f
}
