// SPDX-License-Identifier: MIT

package audit

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fledgehq/fledge/ui/clip"
)

// Column widths of the table. Fixed widths let the table stream with bounded memory.
const (
	colSession  = 16 // a session id is 16 hex digits
	colPlugin   = 16
	colEvent    = 17
	colDecision = 8
	colReason   = 25
	colDetails  = 80
	timeLayout  = "2006-01-02 15:04:05.000"
)

// TableWriter renders records as a fixed-width table, one row per Write, header first.
// Every value is sanitised: a plugin cannot put terminal escapes or bidi overrides into an
// auditor's terminal through its details.
type TableWriter struct {
	w      io.Writer
	header bool
}

// NewTableWriter returns a TableWriter writing to w.
func NewTableWriter(w io.Writer) *TableWriter { return &TableWriter{w: w} }

// Header writes the header row if it has not been written yet.
func (t *TableWriter) Header() error {
	if t.header {
		return nil
	}
	t.header = true
	_, err := fmt.Fprintf(t.w, "%-23s  %6s  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n", "TIME (UTC)", "SEQ",
		colSession, "SESSION", colPlugin, "PLUGIN", colEvent, "EVENT", colDecision, "DECISION", colReason, "REASON", "DETAILS")
	return err
}

// Write renders one record.
func (t *TableWriter) Write(r *Record) error {
	if err := t.Header(); err != nil {
		return err
	}
	plugin := "-"
	if r.Plugin != nil {
		plugin = r.Plugin.Name
		if r.Plugin.Version != "" {
			plugin += "@" + r.Plugin.Version
		}
	}
	session := r.Session
	if session == "" {
		session = "-"
	}
	row := fmt.Sprintf("%-23s  %6d  %s  %s  %s  %s  %s  %s", r.Time.UTC().Format(timeLayout), r.Seq,
		cell(session, colSession), cell(plugin, colPlugin), cell(r.Event, colEvent), cell(string(r.Decision), colDecision),
		cell(r.Reason, colReason), ShortDetails(r.Details, colDetails))
	_, err := io.WriteString(t.w, strings.TrimRight(row, " ")+"\n")
	return err
}

// ShortDetails renders details as sorted key=value pairs, sanitised, at most max runes.
func ShortDetails(d map[string]any, max int) string {
	if len(d) == 0 {
		return ""
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		switch v := d[k].(type) {
		case string:
			if v == "" || strings.ContainsAny(v, " =\"") {
				// Quoted as JSON, but without HTML escaping: "a && b", not "a \u0026\u0026 b".
				j, _ := marshalCompact(v)
				b.Write(j)
			} else {
				b.WriteString(v)
			}
		default:
			j, err := marshalCompact(v)
			if err != nil {
				j = []byte("?")
			}
			b.Write(j)
		}
		if b.Len() > 4*max {
			break
		}
	}
	return clip.Runes(Sanitize(b.String()), max)
}

func cell(s string, width int) string {
	s = clip.Runes(Sanitize(s), width)
	if n := utf8.RuneCountInString(s); n < width {
		s += strings.Repeat(" ", width-n)
	}
	return s
}

// Sanitize escapes everything that is not a printable character (controls, escape
// sequences, bidi overrides and other format characters, invalid UTF-8) as \xNN or \uNNNN.
func Sanitize(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsGraphic(r) || (r != ' ' && unicode.IsSpace(r)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && (!unicode.IsGraphic(r) || (r != ' ' && unicode.IsSpace(r))):
			fmt.Fprintf(&b, `\x%02x`, r)
		case !unicode.IsGraphic(r) || (r != ' ' && unicode.IsSpace(r)):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
