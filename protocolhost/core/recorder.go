// SPDX-License-Identifier: MIT

package core

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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

// Session byte budget. MaxRepeatRecords bounds the count of records; this bounds their
// bytes, so that a plugin with no capability at all cannot fill the disk through the log
// (before it, 1,000 metadata denials of 256 KiB each made 250 MiB per session).
const (
	// DefaultSessionBytes is the default budget of log bytes one session may write
	// (config [audit] session_max_bytes).
	DefaultSessionBytes int64 = 8 << 20
	// MinSessionBytes and MaxSessionBytes bound the configurable budget.
	MinSessionBytes int64 = 256 << 10
	MaxSessionBytes int64 = 1 << 30
	// endReserve is the part of the budget only the records that close a session may use:
	// the budget record, the summary, malformed_lines, sandbox_degraded, plugin_exit. Each is
	// one per session and bounded by the writer's field bounds.
	endReserve = 64 << 10
)

// ErrSessionBudget says a record did not fit the session's byte budget and was counted, not
// written. A decision that must precede an act is refused with it: no record, no act.
var ErrSessionBudget = fmt.Errorf("this session's audit log budget is spent (raise [audit] session_max_bytes in config.toml): %w", audit.ErrBudget)

// tier says which part of the session budget a record may use.
type tier int

const (
	// tierOrdinary: denials and other records a plugin causes at will; they may use the
	// budget up to actReserve() short of it.
	tierOrdinary tier = iota
	// tierAct: decisions that precede an act (exec, tool call, plugin start) and outcomes of
	// what ran; past the budget less endReserve the act is refused.
	tierAct
	// tierEnd: the records that close the session; the whole budget.
	tierEnd
	nTiers
)

var tierNames = [nTiers]string{"denials", "acts", "session_end"}

// tierOf classifies a record by event and decision.
func tierOf(event string, d audit.Decision) tier {
	switch event {
	case audit.EventPluginExit, audit.EventSuppressed, audit.EventMalformed, audit.EventSandboxDegraded:
		return tierEnd
	case audit.EventPluginStart, audit.EventLegacyUnconfined, audit.EventInstall, audit.EventGrant,
		audit.EventRevoke, audit.EventRemove, audit.EventExecOutcome, audit.EventToolOutcome,
		audit.EventHookOutcome, audit.EventInvokeOutcome:
		return tierAct
	case audit.EventExecDecision, audit.EventToolCall, audit.EventHookCall, audit.EventInvokeRequest, audit.EventHandshake:
		if d == audit.Allow {
			return tierAct
		}
	}
	return tierOrdinary
}

// sessionBudget counts the log bytes a session wrote.
type sessionBudget struct {
	mu    sync.Mutex
	limit int64
	used  int64
	start time.Time
	now   func() time.Time // tests move the clock
}

// tierLimit is what the session may have written, in all, when a record of tier t is
// charged. Acts and the session's end get the budget once more per hour the session has
// lived: a long-lived session (a tool provider under `fledge serve`) keeps serving calls at
// a bounded rate, while denials never refill.
func (b *sessionBudget) tierLimit(t tier) int64 {
	switch t {
	case tierOrdinary:
		return b.limit - b.limit/4 // a quarter is kept for acts and the session's end
	case tierAct:
		return b.limit - endReserve + b.refill()
	}
	return b.limit + b.refill()
}

func (b *sessionBudget) refill() int64 {
	h := b.now().Sub(b.start).Hours()
	if h <= 0 {
		return 0
	}
	return int64(float64(b.limit) * h)
}

// tierBudget is the audit.Budget one record is charged to.
type tierBudget struct {
	b *sessionBudget
	t tier
}

func (tb tierBudget) Take(n int) error {
	tb.b.mu.Lock()
	defer tb.b.mu.Unlock()
	if lim := tb.b.tierLimit(tb.t); tb.b.used+int64(n) > lim {
		return fmt.Errorf("%w: %d bytes used, a %d-byte record does not fit the %d for %s", ErrSessionBudget, tb.b.used, n, lim, tierNames[tb.t])
	}
	tb.b.used += int64(n)
	return nil
}

func (tb tierBudget) Refund(n int) {
	tb.b.mu.Lock()
	tb.b.used -= int64(n)
	tb.b.mu.Unlock()
}

// budgetAppender is an audit log that charges records to a budget exactly, under its lock
// (audit.Log does).
type budgetAppender interface {
	AppendBudget(r *audit.Record, durable bool, b audit.Budget) error
	AppendDeferredSyncBudget(r *audit.Record, b audit.Budget) (func() error, error)
}

// Recorder is the one audit writer of a session, whatever its protocol: every record it
// writes carries the session id, the plugin and the sandbox mode, repeated refusals are
// bounded in count and all records together in bytes, and decisions that must precede an
// act are durable before it.
type Recorder struct {
	log     audit.Recorder // nil: records are dropped (tests, audit disabled)
	session string
	plugin  *audit.PluginRef
	sb      *audit.SandboxInfo
	warn    func(string)
	budget  *sessionBudget

	errs atomic.Int64
	// denied and failed count every deny and error decision of the session, written or
	// not (repeats suppressed, over budget): plugin_exit carries them.
	denied, failed atomic.Int64
	repeatMu       sync.Mutex
	repeats        map[string]int
	over           map[string]int // records not written for the budget, by event/decision/reason
	hit            [nTiers]bool   // the budget record of this tier was written
	// managed is the managed policy's digest, put on the session's first record (first).
	managed string
	first   atomic.Bool
	// trace: every sandboxed run of this session is traced (kernel_denied.go).
	trace atomic.Bool
	// late: runs whose last kernel refusals are still on their way (kernel_denied.go).
	lateMu sync.Mutex
	late   []<-chan struct{}
}

// NewRecorder makes the recorder of one session, with DefaultSessionBytes as its budget.
// warn (optional) is told the first failed write, so the user learns the log is failing
// without a flood of warnings.
func NewRecorder(log audit.Recorder, sessionID string, plugin *audit.PluginRef, rep sandbox.Report, warn func(string)) *Recorder {
	if warn == nil {
		warn = func(string) {}
	}
	return &Recorder{
		log: log, session: sessionID, plugin: plugin, warn: warn,
		sb:     &audit.SandboxInfo{Mode: rep.Confinement, LandlockABI: rep.LandlockABI, CgroupMode: rep.CgroupMode},
		budget: &sessionBudget{limit: DefaultSessionBytes, start: time.Now(), now: time.Now},
	}
}

// SetSessionBytes sets the session's byte budget (before the first record); out of
// MinSessionBytes..MaxSessionBytes is an error.
func (r *Recorder) SetSessionBytes(n int64) error {
	if n < MinSessionBytes || n > MaxSessionBytes {
		return fmt.Errorf("session log budget %d outside %d..%d", n, MinSessionBytes, MaxSessionBytes)
	}
	r.budget.mu.Lock()
	r.budget.limit = n
	r.budget.mu.Unlock()
	return nil
}

// BytesWritten is how many log bytes this session's records took.
func (r *Recorder) BytesWritten() int64 {
	r.budget.mu.Lock()
	defer r.budget.mu.Unlock()
	return r.budget.used
}

// SessionID is the id every record of this session carries.
func (r *Recorder) SessionID() string { return r.session }

// Plugin is the plugin the records name.
func (r *Recorder) Plugin() *audit.PluginRef { return r.plugin }

// Errors is how many records could not be written (records counted for the budget are not
// errors: the summary names them).
func (r *Recorder) Errors() int64 { return r.errs.Load() }

// New builds a record of this session (not written).
func (r *Recorder) New(event string, d audit.Decision, rc reason.Code, details map[string]any) *audit.Record {
	rec := &audit.Record{
		Session: r.session, Event: event, Decision: d, Reason: string(rc), Details: details,
		Plugin: r.plugin, Sandbox: r.sb,
	}
	if r.managed != "" && r.first.CompareAndSwap(false, true) {
		rec.ManagedPolicy = r.managed
	}
	return rec
}

// SetManagedPolicy is the managed policy's digest the session's first record carries
// (before the first record).
func (r *Recorder) SetManagedPolicy(digest string) { r.managed = digest }

// Record writes one record unless it is a repetition past MaxRepeatRecords or does not fit
// the session budget (then it is counted for the summary). A failed write is counted (see
// Errors) and warned about once.
func (r *Recorder) Record(event string, d audit.Decision, rc reason.Code, details map[string]any, durable bool) {
	r.count(event, d)
	if r.log == nil || r.suppress(event, d, rc) {
		return
	}
	if err := r.append(r.New(event, d, rc, details), durable); err != nil && !errors.Is(err, audit.ErrBudget) {
		if r.errs.Add(1) == 1 {
			r.warn(fmt.Sprintf("audit log write failed: %v", err))
		}
	}
}

// RecordNow writes one record durably and returns the error: for records without which the
// caller must not go on (a refusal that must be on file, a lifecycle record).
func (r *Recorder) RecordNow(event string, d audit.Decision, rc reason.Code, details map[string]any) error {
	r.count(event, d)
	if r.log == nil {
		return nil
	}
	err := r.append(r.New(event, d, rc, details), true)
	if err != nil && !errors.Is(err, audit.ErrBudget) {
		r.errs.Add(1)
	}
	return err
}

// append writes rec charged to its tier of the budget; a record that does not fit is
// counted (and the first one of its tier writes the budget record).
func (r *Recorder) append(rec *audit.Record, durable bool) error {
	return r.appendAt(rec, durable, tierOf(rec.Event, rec.Decision))
}

func (r *Recorder) appendAt(rec *audit.Record, durable bool, t tier) error {
	tb := tierBudget{r.budget, t}
	var err error
	if ba, ok := r.log.(budgetAppender); ok {
		err = ba.AppendBudget(rec, durable, tb)
	} else {
		err = appendEstimated(r.log, rec, durable, tb)
	}
	if errors.Is(err, audit.ErrBudget) {
		r.overBudget(rec, tb.t)
	}
	return err
}

// appendEstimated charges a record to a log that cannot do it exactly (not an audit.Log):
// by its encoded size before the writer's fields, plus room for them.
func appendEstimated(log audit.Recorder, rec *audit.Record, durable bool, b audit.Budget) error {
	const writerFields = 512 // seq, time, host, uid, pid, prev_hash, hash
	line, err := audit.JSONLine(rec)
	n := len(line) + writerFields
	if err != nil {
		n = audit.DefaultMaxRecordBytes
	}
	if err := b.Take(n); err != nil {
		return err
	}
	if err := log.Append(rec, durable); err != nil {
		b.Refund(n)
		return err
	}
	return nil
}

// overBudget counts a record the budget refused; the first of its tier writes the one
// session_log_budget record (from the end reserve).
func (r *Recorder) overBudget(rec *audit.Record, t tier) {
	r.repeatMu.Lock()
	if r.over == nil {
		r.over = map[string]int{}
	}
	r.over[rec.Event+"/"+string(rec.Decision)+"/"+rec.Reason]++
	first := !r.hit[t]
	r.hit[t] = true
	r.repeatMu.Unlock()
	if !first || t == tierEnd {
		return
	}
	r.budget.mu.Lock()
	limit, used := r.budget.limit, r.budget.used
	r.budget.mu.Unlock()
	msg := "the session's audit log budget for denials is spent: further denials and other requests are counted, not written (summed up at session end); the plugin keeps running"
	if t == tierAct {
		msg = "the session's audit log budget is spent: execs and tool calls are refused from now on (no record, no act); other records are counted, not written"
	}
	err := r.appendAt(r.New(audit.EventLimit, audit.Deny, reason.LimitExceeded, map[string]any{
		audit.DetailLimit: "session_log_budget", audit.DetailLimitValue: limit, "tier": tierNames[t],
		"tier_limit": r.budget.tierLimit(t), "used_bytes": used, "first_refused": rec.Event, audit.DetailMessage: msg,
	}), true, tierEnd)
	if err != nil && !errors.Is(err, audit.ErrBudget) && r.errs.Add(1) == 1 {
		r.warn(fmt.Sprintf("audit log write failed: %v", err))
	}
}

// BeforeAct writes an allow decision that must be durable before the act it allows. It
// returns the sync to run right before the act (nil when already durable), so the fsync
// overlaps the sandbox setup. An error means the record is not written and the act must
// not happen: that includes a session whose log budget is spent (ErrSessionBudget).
func (r *Recorder) BeforeAct(event string, details map[string]any) (func() error, error) {
	if r.log == nil {
		return nil, nil
	}
	rec := r.New(event, audit.Allow, reason.OK, details)
	tb := tierBudget{r.budget, tierAct}
	var sync func() error
	var err error
	if ba, ok := r.log.(budgetAppender); ok {
		sync, err = ba.AppendDeferredSyncBudget(rec, tb)
	} else {
		err = appendEstimated(r.log, rec, true, tb)
	}
	switch {
	case errors.Is(err, audit.ErrBudget):
		r.overBudget(rec, tierAct)
	case err != nil:
		r.errs.Add(1)
	}
	return sync, err
}

// PendingAct is a decision record being written in the background (BeforeActAsync).
type PendingAct struct {
	done    chan struct{}
	sync    func() error
	err     error // the append's error (nil: written; durable once sync returned nil)
	once    sync.Once
	syncErr error
}

// BeforeActAsync is BeforeAct started in its own goroutine, for an act whose preparation
// (a sandbox's Start) can overlap the record's writing: Durable waits for the record to be
// written and synced, and is the act's BeforeExec. The one way every adapter overlaps a
// decision record with the launch it allows.
func (r *Recorder) BeforeActAsync(event string, details map[string]any) *PendingAct {
	p := &PendingAct{done: make(chan struct{})}
	if r.log == nil {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		p.sync, p.err = r.BeforeAct(event, details)
	}()
	return p
}

// Durable waits for the record (its append, then its fsync) and says whether it is on
// disk. It only waits for work of other goroutines (BeforeExec may run on a confined
// launch thread), and may be called any number of times: after a Start that never reached
// BeforeExec it still completes the sync, which releases the record's hold on the log.
func (p *PendingAct) Durable() error {
	<-p.done
	if p.err != nil {
		return p.err
	}
	p.once.Do(func() {
		if p.sync != nil {
			p.syncErr = p.sync()
		}
	})
	return p.syncErr
}

// BeforeActNow is BeforeAct for an act that follows at once (a request written to a pipe):
// with nothing to overlap the flush with, the record is durable when it returns, its fsync
// shared with the appends running alongside (the log's group commit), and no background
// flush is started.
func (r *Recorder) BeforeActNow(event string, details map[string]any) error {
	if r.log == nil {
		return nil
	}
	err := r.appendAt(r.New(event, audit.Allow, reason.OK, details), true, tierAct)
	if err != nil && !errors.Is(err, audit.ErrBudget) {
		r.errs.Add(1)
	}
	return err
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

// Close writes the session's summary of records not written, if any: repetitions past
// MaxRepeatRecords (suppressed) and records past the byte budget (over_budget).
func (r *Recorder) Close() {
	// The session's runs' last kernel refusals belong before its summary and plugin_exit.
	r.SettleKernel()
	r.repeatMu.Lock()
	suppressed := map[string]any{}
	for k, n := range r.repeats {
		if n > MaxRepeatRecords {
			suppressed[k] = n - MaxRepeatRecords
		}
	}
	over := map[string]any{}
	for k, n := range r.over {
		over[k] = n
	}
	r.repeatMu.Unlock()
	if len(suppressed) == 0 && len(over) == 0 {
		return
	}
	d := map[string]any{audit.DetailLimit: "records_per_kind", audit.DetailLimitValue: MaxRepeatRecords, "suppressed": suppressed}
	if len(over) > 0 {
		r.budget.mu.Lock()
		limit, used := r.budget.limit, r.budget.used
		r.budget.mu.Unlock()
		d[audit.DetailLimit], d[audit.DetailLimitValue] = "session_log_budget", limit
		d["records_per_kind"] = MaxRepeatRecords
		d["over_budget"] = over
		d["used_bytes"] = used
	}
	r.Record(audit.EventSuppressed, audit.Deny, reason.LimitExceeded, d, false)
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
// warnings for the user (what was moved, and how to restore it). The paths are the
// plugin's choice (any byte but NUL and '/'): they are quoted, so a name carrying escape
// sequences or line breaks reads as a name wherever the warning ends up.
func (r *Recorder) Quarantined(qs []sandbox.Quarantine) []string {
	var warn []string
	for _, q := range qs {
		d := map[string]any{"path": q.Path, "repository": q.Repository, audit.DetailMessage: q.Why}
		if q.MovedTo != "" {
			d["moved_to"] = q.MovedTo
			warn = append(warn, fmt.Sprintf("a sandboxed run left %q, which git would run code from (%s); moved it to %q: look inside before restoring it with mv", q.Path, q.Why, q.MovedTo))
		} else {
			d["error"] = q.Err
			warn = append(warn, fmt.Sprintf("a sandboxed run left %q, which git would run code from (%s), and it could not be moved (%q): do not run git in %q before removing it", q.Path, q.Why, q.Err, q.Repository))
		}
		r.Record(audit.EventGitQuarantine, audit.Deny, reason.PathEscape, d, true)
	}
	return warn
}

// count tallies a deny or error decision for the session's plugin_exit record.
func (r *Recorder) count(event string, d audit.Decision) {
	if event == audit.EventPluginExit {
		return
	}
	switch d {
	case audit.Deny:
		r.denied.Add(1)
	case audit.Error:
		r.failed.Add(1)
	}
}

// Counts are the session's deny and error decisions so far (every one, including those a
// bound kept out of the log).
func (r *Recorder) Counts() (denied, errors int64) { return r.denied.Load(), r.failed.Load() }
