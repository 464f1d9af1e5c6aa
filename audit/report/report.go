// SPDX-License-Identifier: MIT

// Package report writes the auditor's picture of the audit log: one self-contained HTML page
// (`fledge audit report`, served live by `fledge audit ui`) with the verify verdict, the
// sessions, each session's timeline and each plugin's destinations and refused paths.
//
// Every record holds text a plugin chose, so the page is built to show it and nothing more:
// the page's markup comes from html/template; the records travel as one gzip-compressed,
// base64-encoded JSON document in a non-executed <script> data block (the base64 alphabet
// cannot end the element), and the page's one script, allowed by its SHA-256 hash in a
// Content-Security-Policy that allows nothing else, puts every string into the page with
// textContent. Controls and bidirectional overrides are shown as visible stand-ins
// (Visible) and long strings are clipped with their full length stated (Clip).
//
// The log is read twice and never held whole: a first pass sums up the sessions
// (audit.Sessions), the second streams each record's row through the compressor into the
// output as it is read.
package report

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/fledgehq/fledge/audit"
)

//go:embed page.js
var pageJS string

//go:embed page.css
var pageCSS string

// Title is the page's title, whatever the records hold.
const Title = "fledge audit report"

// DataElementID is the id of the data block holding the records.
const DataElementID = "fledge-data"

// Options says what to put on the page.
type Options struct {
	// Path is the audit log.
	Path   string
	Filter audit.Filter
	// Witness is the newest checkpoint a witness kept (nil: none given), WitnessFrom where
	// it was read from.
	Witness     *audit.Head
	WitnessFrom string
	// EventsURL, when set, makes the page live: it subscribes to this URL (same origin)
	// for new rows as server-sent events (audit ui). Empty: a static report.
	EventsURL string
	// Version is fledge's version, Now the time the page is made.
	Version string
	Now     time.Time
}

// Stats is what Write wrote.
type Stats struct {
	Records  int
	Sessions int
	LastSeq  uint64
}

var (
	scriptHash = hashCSP(pageJS)
	styleHash  = hashCSP(pageCSS)
)

func hashCSP(s string) string {
	h := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(h[:]) + "'"
}

// CSP is the page's Content-Security-Policy: its own script and style (by hash), nothing
// else; a live page may also connect to its own origin (the event stream).
func CSP(live bool) string {
	connect := "'none'"
	if live {
		connect = "'self'"
	}
	return "default-src 'none'; script-src " + scriptHash + "; style-src " + styleHash +
		"; img-src 'none'; font-src 'none'; media-src 'none'; object-src 'none'; frame-src 'none'" +
		"; worker-src 'none'; manifest-src 'none'; connect-src " + connect +
		"; base-uri 'none'; form-action 'none'"
}

type verdict struct {
	OK      bool
	Lines   []string
	Warning string
}

type headData struct {
	Title     string
	CSP       string
	CSS       template.CSS
	Generated string
	Version   string
	LogPath   string
	Filter    string
	Verdict   verdict
	EventsURL string
}

type tailData struct {
	JS template.JS
}

// The page's templates are parsed on first use: every fledge process links this package,
// and a process that writes no page (a plugin's run, its pid-namespace holder, its
// watchdog) pays nothing for them at start.
var (
	headTmpl = sync.OnceValue(func() *template.Template {
		return template.Must(template.New("head").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{.CSP}}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>{{.CSS}}</style>
</head>
<body data-live="{{.EventsURL}}">
<header class="top">
<h1>{{.Title}}</h1>
<p class="meta">Log <code>{{.LogPath}}</code> · {{.Filter}} · made {{.Generated}} by fledge {{.Version}}<span id="live"></span></p>
</header>
<section class="verdict {{if .Verdict.OK}}ok{{else}}broken{{end}}" id="verdict">
<h2>{{if .Verdict.OK}}✔ Chain intact{{else}}✘ Chain broken{{end}}</h2>
<ul>{{range .Verdict.Lines}}<li>{{.}}</li>{{end}}</ul>
{{if .Verdict.Warning}}<p class="warn">{{.Verdict.Warning}}</p>{{end}}
</section>
<noscript><p class="warn">This page draws its sessions and timelines with its own script (no other is allowed to run); enable JavaScript, or read the log with fledge audit show.</p></noscript>
<main id="app"><p class="loading">Reading the records…</p></main>
`))
	})
	tailTmpl = sync.OnceValue(func() *template.Template {
		return template.Must(template.New("tail").Parse(`<script>{{.JS}}</script>
</body>
</html>
`))
	})
)

// Write writes the page for the log at o.Path to w.
func Write(w io.Writer, o Options) (*Stats, error) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	vr, verr := audit.VerifyWith(o.Path, audit.VerifyOptions{Witness: o.Witness})
	sess, err := audit.Sessions(o.Path, o.Filter)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	hd := headData{
		Title: Title, CSP: CSP(o.EventsURL != ""), CSS: template.CSS(pageCSS),
		Generated: o.Now.UTC().Format("2006-01-02 15:04:05 UTC"), Version: o.Version,
		LogPath: Visible(o.Path), Filter: describeFilter(o.Filter),
		Verdict: makeVerdict(vr, verr, o), EventsURL: o.EventsURL,
	}
	if err := headTmpl().Execute(bw, hd); err != nil {
		return nil, err
	}
	st, err := writeData(bw, o, sess)
	if err != nil {
		return nil, err
	}
	if err := tailTmpl().Execute(bw, tailData{JS: template.JS(pageJS)}); err != nil {
		return nil, err
	}
	return st, bw.Flush()
}

// writeData writes the data block: the sessions, then each matching record's row as it is
// read, then the per-plugin aggregates, as one JSON document, gzip-compressed and base64
// encoded. Memory: the sessions (bounded by audit.MaxSessions), the aggregates (bounded
// by maxAggKeys per plugin and kind) and one record at a time.
func writeData(w io.Writer, o Options, sess *audit.SessionsReport) (*Stats, error) {
	if _, err := fmt.Fprintf(w, `<script type="application/x-fledge-records+gzip+base64" id="%s">`, DataElementID); err != nil {
		return nil, err
	}
	b64 := base64.NewEncoder(base64.StdEncoding, w)
	zw, err := gzip.NewWriterLevel(b64, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	enc := json.NewEncoder(zw)
	enc.SetEscapeHTML(false) // the document is compressed: no byte of it reaches the HTML parser
	ss := make([]audit.SessionSummary, len(sess.Sessions))
	for i, s := range sess.Sessions {
		c := *s
		c.ID, c.Plugin, c.Version = Clip(c.ID, 64), Clip(c.Plugin, 128), Clip(c.Version, 64)
		c.Start, c.End = c.Start.UTC(), c.End.UTC()
		ss[i] = c
	}
	io.WriteString(zw, `{"v":1,"sessions":`)
	if err := enc.Encode(ss); err != nil {
		return nil, err
	}
	fmt.Fprintf(zw, `,"dropped":%d,"rows":[`, sess.Dropped)
	st := &Stats{Sessions: len(ss)}
	agg := aggregates{}
	err = audit.Query(o.Path, o.Filter, func(r *audit.Record) error {
		row := NewRow(r)
		agg.add(row)
		if st.Records > 0 {
			if _, err := io.WriteString(zw, ","); err != nil {
				return err
			}
		}
		st.Records++
		st.LastSeq = r.Seq
		return enc.Encode(row)
	})
	if err != nil {
		return nil, err
	}
	io.WriteString(zw, `],"aggregates":`)
	if err := enc.Encode(agg.list()); err != nil {
		return nil, err
	}
	fmt.Fprintf(zw, `,"last_seq":%d}`, st.LastSeq)
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := b64.Close(); err != nil {
		return nil, err
	}
	_, err = io.WriteString(w, "</script>\n")
	return st, err
}

func describeFilter(f audit.Filter) string {
	var parts []string
	if f.Plugin != "" {
		parts = append(parts, "plugin "+Clip(f.Plugin, 128))
	}
	if f.Session != "" {
		parts = append(parts, "session "+Clip(f.Session, 64))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since "+f.Since.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "all records"
	}
	return "records of " + strings.Join(parts, ", ")
}

func makeVerdict(vr *audit.VerifyReport, verr error, o Options) verdict {
	if verr != nil {
		return verdict{Lines: []string{Clip("could not verify: "+verr.Error(), 1024)}}
	}
	v := verdict{OK: vr.OK}
	if vr.OK {
		v.Lines = append(v.Lines, fmt.Sprintf("the whole log verifies: %d records in %d file(s), seq up to %d (the records shown are among them)", vr.Records, len(vr.Files), vr.LastSeq))
		if vr.PrunedThrough > 0 {
			v.Lines = append(v.Lines, fmt.Sprintf("pruned: seq 1..%d deleted by fledge ([audit] max_total_bytes), recorded by log_pruned seq %d", vr.PrunedThrough, vr.PrunedBy))
		}
	} else {
		b := vr.Break
		where := ""
		if b.File != "" {
			where = fmt.Sprintf(" at %s line %d", b.File, b.Line)
		}
		v.Lines = append(v.Lines, Clip(fmt.Sprintf("BROKEN: %s%s (seq %d): %s", b.Kind, where, b.Seq, b.Detail), 1024),
			fmt.Sprintf("%d records verified before the break; last good: seq %d", vr.Records, vr.LastSeq))
	}
	if vr.RecoveredCount > 0 {
		v.Lines = append(v.Lines, fmt.Sprintf("recovered from %d crash(es) of the writer (log_recovered records)", vr.RecoveredCount))
	}
	if vr.Head != nil {
		v.Lines = append(v.Lines, fmt.Sprintf("head: seq %d (%s)%s", vr.Head.Seq, vr.Head.Time.UTC().Format(time.RFC3339), reached(vr.OK)))
	} else {
		v.Lines = append(v.Lines, "head: none yet (written at the first durable append)")
	}
	switch {
	case o.Witness != nil:
		v.Lines = append(v.Lines, Clip(fmt.Sprintf("witness: seq %d from %s%s", o.Witness.Seq, o.WitnessFrom, reached(vr.OK)), 1024))
	case o.WitnessFrom != "":
		v.Lines = append(v.Lines, Clip("witness: no checkpoint of this log in "+o.WitnessFrom, 1024))
	default:
		v.Lines = append(v.Lines, "witness: not checked (give --witness, as to fledge audit verify)")
	}
	if o.EventsURL != "" {
		v.Warning = "Verified when this page was loaded; records arriving since are shown live but not verified: reload to verify again."
	}
	return v
}

func reached(ok bool) string {
	if ok {
		return ", reached"
	}
	return ""
}

// WriteEvent writes one record's row as a server-sent event (audit ui's live updates).
func WriteEvent(w io.Writer, r *audit.Record) error {
	b, err := json.Marshal(NewRow(r))
	if err != nil {
		return err
	}
	// json.Marshal escapes no newline into the output: one data line per event.
	_, err = fmt.Fprintf(w, "data: %s\n\n", b)
	return err
}
