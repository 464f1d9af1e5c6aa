// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/audit/otlp"
)

// ErrExportOff: `fledge audit export` with no [audit] export configured.
var ErrExportOff = errors.New(`audit export is off: set [audit] export = "otlp" (and otlp_endpoint) in config.toml`)

// ExportAudit sends the records f matches to the configured collector by hand, without
// moving the export cursor (the background export still sends what it has not). It returns
// how many records the collector acknowledged.
func (h *Host) ExportAudit(ctx context.Context, f audit.Filter) (int, string, error) {
	c, err := h.Env.ExportClient()
	if err != nil {
		return 0, "", err
	}
	if c == nil {
		return 0, "", ErrExportOff
	}
	n, err := otlp.Range(ctx, h.Env.AuditPath, f, c)
	return n, c.URL(), err
}

// exportDoctor is the export's state for doctor: where, how far acknowledged, what waits.
func (d *Doctor) exportJSON() map[string]any {
	e := d.h.Env
	if e.Config.Audit.Export == "" {
		return map[string]any{"enabled": false}
	}
	out := map[string]any{"enabled": true, "kind": e.Config.Audit.Export}
	c, err := e.ExportClient()
	if err != nil {
		out["error"] = err.Error()
	} else if c != nil {
		out["endpoint"] = c.URL()
		proto, _ := otlp.CheckProtocol(e.Config.Audit.OTLPProtocol)
		out["protocol"] = proto
	}
	st, err := otlp.ReadState(e.AuditPath)
	if err != nil {
		out["state_error"] = err.Error()
		return out
	}
	out["acked_seq"] = st.Acked.Seq
	if !st.Acked.Time.IsZero() {
		out["acked_at"] = st.Acked.Time.Format(time.RFC3339)
	}
	out["last_seq"] = st.LastSeq
	out["backlog"] = st.Backlog
	return out
}

func (d *Doctor) exportText() string {
	j := d.exportJSON()
	if j["enabled"] == false {
		return "off (the log stays on this machine)"
	}
	s := fmt.Sprintf("%v", j["kind"])
	if u, ok := j["endpoint"]; ok {
		s += fmt.Sprintf(" to %v (%v)", u, j["protocol"])
	}
	if msg, ok := j["error"]; ok {
		s += fmt.Sprintf("; NOT SENDING: %v", msg)
	}
	if msg, ok := j["state_error"]; ok {
		return s + fmt.Sprintf("; state unreadable: %v", msg)
	}
	acked := "nothing acknowledged yet"
	if seq, _ := j["acked_seq"].(uint64); seq > 0 {
		acked = fmt.Sprintf("acknowledged through seq %d", seq)
		if at, ok := j["acked_at"]; ok {
			acked += fmt.Sprintf(" at %v", at)
		}
	}
	return fmt.Sprintf("%s; %s; backlog %v records (log at seq %v)", s, acked, j["backlog"], j["last_seq"])
}
