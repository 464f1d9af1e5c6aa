// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// MaxSessions bounds the sessions Sessions keeps in memory (sessions interleave in the log,
// so all open ones are held until the end). Past it new sessions are only counted.
const MaxSessions = 100_000

// SessionSummary is one session: a plugin run, from its first record to its last.
type SessionSummary struct {
	ID      string    `json:"session"`
	Plugin  string    `json:"plugin,omitempty"`
	Version string    `json:"version,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	// Ended says a plugin_exit record closed it; a session without one is still running,
	// or its fledge process died.
	Ended   bool `json:"ended"`
	Records int  `json:"records"`
	Allow   int  `json:"allow"`
	Deny    int  `json:"deny"`
	Error   int  `json:"error"`
	// FirstSeq and LastSeq bound its records in the log.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// SessionsReport is the result of Sessions.
type SessionsReport struct {
	Sessions []*SessionSummary // by start, oldest first
	// Dropped counts sessions past MaxSessions (narrow with --since or --plugin).
	Dropped int
}

// Sessions summarises the sessions of the log at path that have a record f matches; a
// session's counts are over the matching records.
func Sessions(path string, f Filter) (*SessionsReport, error) {
	byID := map[string]*SessionSummary{}
	rep := &SessionsReport{}
	dropped := map[string]bool{}
	err := Query(path, f, func(r *Record) error {
		if r.Session == "" {
			return nil
		}
		s := byID[r.Session]
		if s == nil {
			if len(byID) >= MaxSessions {
				if !dropped[r.Session] && len(dropped) < MaxSessions {
					dropped[r.Session] = true
					rep.Dropped++
				}
				return nil
			}
			s = &SessionSummary{ID: r.Session, Start: r.Time, FirstSeq: r.Seq}
			byID[r.Session] = s
			rep.Sessions = append(rep.Sessions, s)
		}
		if s.Plugin == "" && r.Plugin != nil {
			s.Plugin, s.Version = r.Plugin.Name, r.Plugin.Version
		}
		s.End, s.LastSeq = r.Time, r.Seq
		s.Records++
		switch r.Decision {
		case Allow:
			s.Allow++
		case Deny:
			s.Deny++
		case Error:
			s.Error++
		}
		if r.Event == EventPluginExit {
			s.Ended = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(rep.Sessions, func(i, j int) bool { return rep.Sessions[i].Start.Before(rep.Sessions[j].Start) })
	return rep, nil
}

// WriteSessionsTable prints one sanitised row per session.
func WriteSessionsTable(w io.Writer, ss []*SessionSummary) error {
	if _, err := fmt.Fprintf(w, "%-16s  %-*s  %-23s  %-23s  %6s  %6s  %6s  %7s\n",
		"SESSION", colPlugin, "PLUGIN", "START (UTC)", "END (UTC)", "ALLOW", "DENY", "ERROR", "RECORDS"); err != nil {
		return err
	}
	for _, s := range ss {
		plugin := "-"
		if s.Plugin != "" {
			plugin = s.Plugin
			if s.Version != "" {
				plugin += "@" + s.Version
			}
		}
		end := s.End.UTC().Format(timeLayout)
		if !s.Ended {
			end += " …" // no plugin_exit: running, or its fledge died
		}
		row := fmt.Sprintf("%s  %s  %-23s  %-23s  %6d  %6d  %6d  %7d", cell(s.ID, 16), cell(plugin, colPlugin),
			s.Start.UTC().Format(timeLayout), end, s.Allow, s.Deny, s.Error, s.Records)
		if _, err := io.WriteString(w, strings.TrimRight(row, " ")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// WriteSessionsJSON prints one JSON object per session.
func WriteSessionsJSON(w io.Writer, ss []*SessionSummary) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, s := range ss {
		c := *s
		c.Start, c.End = c.Start.UTC(), c.End.UTC()
		if err := enc.Encode(&c); err != nil {
			return err
		}
	}
	return nil
}
