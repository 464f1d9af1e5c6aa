package core

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
)

// MaxRepeatRecords bounds how many records one kind of repeated request (event, decision,
// reason) writes per session; past it they are counted and summed up in one
// audit_suppressed record at the end. A hostile plugin must not be able to fill the disk
// through the audit log by spamming denied stores or execs. Lifecycle records and allowed
// decisions of things that run are never suppressed: each of those is something that ran.
const MaxRepeatRecords = 1000

// Recorder is the one audit writer of a session, whatever its protocol: every record it
// writes carries the session id, the plugin and the sandbox mode, repeated refusals are
// bounded, and decisions that must precede an act are durable before it.
type Recorder struct {
	log     audit.Recorder // nil: records are dropped (tests, audit disabled)
	session string
	plugin  *audit.PluginRef
	sb      *audit.SandboxInfo
	warn    func(string)

	errs     atomic.Int64
	repeatMu sync.Mutex
	repeats  map[string]int
}

// NewRecorder makes the recorder of one session. warn (optional) is told the first failed
// write, so the user learns the log is failing without a flood of warnings.
func NewRecorder(log audit.Recorder, sessionID string, plugin *audit.PluginRef, rep sandbox.Report, warn func(string)) *Recorder {
	if warn == nil {
		warn = func(string) {}
	}
	return &Recorder{
		log: log, session: sessionID, plugin: plugin, warn: warn,
		sb: &audit.SandboxInfo{Mode: rep.Confinement, LandlockABI: rep.LandlockABI, CgroupMode: rep.CgroupMode},
	}
}

// SessionID is the id every record of this session carries.
func (r *Recorder) SessionID() string { return r.session }

// Plugin is the plugin the records name.
func (r *Recorder) Plugin() *audit.PluginRef { return r.plugin }

// Errors is how many records could not be written.
func (r *Recorder) Errors() int64 { return r.errs.Load() }

// New builds a record of this session (not written).
func (r *Recorder) New(event string, d audit.Decision, rc reason.Code, details map[string]any) *audit.Record {
	return &audit.Record{
		Session: r.session, Event: event, Decision: d, Reason: string(rc), Details: details,
		Plugin: r.plugin, Sandbox: r.sb,
	}
}

// Record writes one record unless it is a repetition past MaxRepeatRecords. A failed write
// is counted (see Errors) and warned about once.
func (r *Recorder) Record(event string, d audit.Decision, rc reason.Code, details map[string]any, durable bool) {
	if r.log == nil || r.suppress(event, d, rc) {
		return
	}
	if err := r.log.Append(r.New(event, d, rc, details), durable); err != nil {
		if r.errs.Add(1) == 1 {
			r.warn(fmt.Sprintf("audit log write failed: %v", err))
		}
	}
}

// RecordNow writes one record durably and returns the error: for records without which the
// caller must not go on (a refusal that must be on file, a lifecycle record).
func (r *Recorder) RecordNow(event string, d audit.Decision, rc reason.Code, details map[string]any) error {
	if r.log == nil {
		return nil
	}
	if err := r.log.Append(r.New(event, d, rc, details), true); err != nil {
		r.errs.Add(1)
		return err
	}
	return nil
}

// deferredSyncer is an audit log that can write a record now and make it durable later
// (audit.Log does).
type deferredSyncer interface {
	AppendDeferredSync(r *audit.Record) (func() error, error)
}

// BeforeAct writes an allow decision that must be durable before the act it allows. It
// returns the sync to run right before the act (nil when already durable), so the fsync
// overlaps the sandbox setup. An error means the record is not written and the act must
// not happen.
func (r *Recorder) BeforeAct(event string, details map[string]any) (func() error, error) {
	if r.log == nil {
		return nil, nil
	}
	rec := r.New(event, audit.Allow, reason.OK, details)
	var sync func() error
	var err error
	if ds, ok := r.log.(deferredSyncer); ok {
		sync, err = ds.AppendDeferredSync(rec)
	} else {
		err = r.log.Append(rec, true)
	}
	if err != nil {
		r.errs.Add(1)
	}
	return sync, err
}

func (r *Recorder) suppress(event string, d audit.Decision, rc reason.Code) bool {
	switch event {
	case audit.EventPluginStart, audit.EventPluginExit, audit.EventMalformed, audit.EventSandboxDegraded, audit.EventSuppressed:
		return false
	case audit.EventExecDecision, audit.EventExecOutcome, audit.EventToolCall, audit.EventToolOutcome:
		if d == audit.Allow || ((event == audit.EventExecOutcome || event == audit.EventToolOutcome) && rc != reason.OK) {
			return false // a command or a tool ran
		}
	}
	key := event + "/" + string(d) + "/" + string(rc)
	r.repeatMu.Lock()
	defer r.repeatMu.Unlock()
	if r.repeats == nil {
		r.repeats = map[string]int{}
	}
	r.repeats[key]++
	return r.repeats[key] > MaxRepeatRecords
}

// Close writes the session's summary of suppressed records, if any.
func (r *Recorder) Close() {
	r.repeatMu.Lock()
	over := map[string]any{}
	for k, n := range r.repeats {
		if n > MaxRepeatRecords {
			over[k] = n - MaxRepeatRecords
		}
	}
	r.repeatMu.Unlock()
	if len(over) > 0 {
		r.Record(audit.EventSuppressed, audit.Deny, reason.LimitExceeded, map[string]any{
			audit.DetailLimit: "records_per_kind", audit.DetailLimitValue: MaxRepeatRecords, "suppressed": over,
		}, false)
	}
}

// Degraded records, once per session, what the sandbox cannot enforce here: with a strict
// policy the start is refused (deny), else the plugin runs with less (error).
func (r *Recorder) Degraded(rep sandbox.Report, strict bool) {
	if len(rep.Warnings) == 0 && rep.Confinement != "none" {
		return
	}
	d := audit.Error
	if strict {
		d = audit.Deny
	}
	missing := rep.Warnings
	if missing == nil {
		missing = []string{}
	}
	r.Record(audit.EventSandboxDegraded, d, reason.SandboxUnavailable, map[string]any{
		audit.DetailMissing: missing, "confinement": rep.Confinement, "strict": strict,
	}, false)
}

// Quarantined records each nested git repository (or index) a run left where the user's
// git would run code from it, and that the sandbox moved aside when the run ended: a deny,
// since the run reached for code execution outside the sandbox. It returns the one-line
// warnings for the user (what was moved, and how to restore it).
func (r *Recorder) Quarantined(qs []sandbox.Quarantine) []string {
	var warn []string
	for _, q := range qs {
		d := map[string]any{"path": q.Path, "repository": q.Repository, audit.DetailMessage: q.Why}
		if q.MovedTo != "" {
			d["moved_to"] = q.MovedTo
			warn = append(warn, fmt.Sprintf("a sandboxed run left %s, which git would run code from (%s); moved it to %s: look inside before restoring it with mv", q.Path, q.Why, q.MovedTo))
		} else {
			d["error"] = q.Err
			warn = append(warn, fmt.Sprintf("a sandboxed run left %s, which git would run code from (%s), and it could not be moved (%s): do not run git in %s before removing it", q.Path, q.Why, q.Err, q.Repository))
		}
		r.Record(audit.EventGitQuarantine, audit.Deny, reason.PathEscape, d, true)
	}
	return warn
}
