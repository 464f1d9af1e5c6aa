// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Secret redaction: fledge hands a plugin secrets by name (policy grants secret=NAME), and
// the plugin may hand their values back as text of its own: a command line, a working
// directory, a store key, a name it looks up. Every record passes through the writer's seal,
// so the values are taken out there, once, whoever built the record: each occurrence of a
// value, or of one of its common encodings, reads [secret:NAME].

// MinSecretBytes is the shortest value redaction accepts. Shorter values would shred every
// record (a 3-character value matches in paths, hashes and words alike), so a secret shorter
// than this is refused where it is set and where it is handed out.
const MinSecretBytes = 8

// ErrSecretTooShort: a secret value under MinSecretBytes, which cannot be kept out of the
// records without redacting unrelated text too.
var ErrSecretTooShort = fmt.Errorf("secret shorter than %d bytes", MinSecretBytes)

// Redacted is the text that replaces a secret's value (or an encoding of it) in a record.
func Redacted(name string) string { return "[secret:" + name + "]" }

// Redactor holds the secret values this process handed out and replaces them in text. It
// is safe for concurrent use; a nil *Redactor redacts nothing.
type Redactor struct {
	mu      sync.RWMutex
	values  map[string]string // value -> name
	needles []needle          // longest first
}

type needle struct {
	text string // ASCII-lowercased: matching ignores ASCII case
	name string
}

// NewRedactor returns an empty Redactor.
func NewRedactor() *Redactor { return &Redactor{values: map[string]string{}} }

// Add registers the value of secret name: from now on it, and its encodings, are redacted.
// A value under MinSecretBytes is refused (ErrSecretTooShort) and not registered.
func (r *Redactor) Add(name, value string) error {
	if r == nil {
		return errors.New("audit: nil redactor")
	}
	if len(value) < MinSecretBytes {
		return fmt.Errorf("%w: %s has %d", ErrSecretTooShort, name, len(value))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.values[value]; ok {
		return nil
	}
	r.values[value] = name
	seen := map[string]bool{}
	for _, n := range r.needles {
		seen[n.text] = true
	}
	for _, f := range secretForms(value) {
		f = asciiLower(f)
		// An encoding's aligned middle of a short value can be short itself; below the
		// minimum it would match unrelated text.
		if len(f) < MinSecretBytes || seen[f] {
			continue
		}
		seen[f] = true
		r.needles = append(r.needles, needle{f, name})
	}
	sort.SliceStable(r.needles, func(i, j int) bool { return len(r.needles[i].text) > len(r.needles[j].text) })
	return nil
}

// Empty reports whether no value is registered.
func (r *Redactor) Empty() bool {
	if r == nil {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.needles) == 0
}

// secretForms are the texts a value is recognised by (matched ignoring ASCII case, so
// lowercased and uppercased forms and hex in either case are covered):
//   - the value itself, and its Unicode lower and upper case;
//   - URL query-escaped and path-escaped;
//   - hex;
//   - base64 (standard and URL alphabets) and base32 (standard and hex alphabets), as the
//     middle of the encoding that depends on the value alone, at each alignment: this is what
//     "user:VALUE", "VALUE:" (HTTP Basic credentials) or any other text around the value
//     encodes to, whatever comes before or after. Up to two bytes (base64) or four (base32)
//     at each end of the value share their characters with the text around it and stay.
func secretForms(v string) []string {
	b := []byte(v)
	forms := []string{v, strings.ToLower(v), strings.ToUpper(v), url.QueryEscape(v), url.PathEscape(v), hex.EncodeToString(b)}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		forms = append(forms, alignedMiddles(b, 3, enc.EncodeToString)...)
	}
	for _, enc := range []*base32.Encoding{base32.StdEncoding.WithPadding(base32.NoPadding), base32.HexEncoding.WithPadding(base32.NoPadding)} {
		forms = append(forms, alignedMiddles(b, 5, enc.EncodeToString)...)
	}
	return forms
}

// alignedMiddles encodes, for each of the group's alignments, the whole groups of b that
// start at it: those characters are the same in the encoding of any text containing b at
// that alignment.
func alignedMiddles(b []byte, group int, encode func([]byte) string) []string {
	var out []string
	for skip := 0; skip < group && skip < len(b); skip++ {
		rest := b[skip:]
		n := len(rest) / group * group
		if n > 0 {
			out = append(out, encode(rest[:n]))
		}
	}
	return out
}

// Redact returns s with every registered value, and every form of it, replaced by
// [secret:NAME]. A match may also span dots ("tok.en" for "token"), as a value split
// across the labels of a DNS name is.
func (r *Redactor) Redact(s string) string {
	if r == nil || s == "" {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.needles) == 0 {
		return s
	}
	low := asciiLower(s)
	var spans []span
	for _, n := range r.needles {
		spans = findAll(spans, low, n, nil)
	}
	if strings.IndexByte(s, '.') >= 0 {
		// The same text with its dots taken out, and where each byte came from.
		var b strings.Builder
		at := make([]int, 0, len(low))
		for i := 0; i < len(low); i++ {
			if low[i] != '.' {
				b.WriteByte(low[i])
				at = append(at, i)
			}
		}
		for _, n := range r.needles {
			spans = findAll(spans, b.String(), n, at)
		}
	}
	if len(spans) == 0 {
		return s
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	var out strings.Builder
	last := 0
	for i := 0; i < len(spans); {
		sp := spans[i]
		// Overlapping matches become one replacement (named for the first).
		for i++; i < len(spans) && spans[i].from < sp.to; i++ {
			sp.to = max(sp.to, spans[i].to)
		}
		out.WriteString(s[last:sp.from])
		out.WriteString(Redacted(sp.name))
		last = sp.to
	}
	out.WriteString(s[last:])
	return out.String()
}

type span struct {
	from, to int
	name     string
}

// findAll appends the spans of n in hay; at (when not nil) maps hay's byte offsets back to
// the original string's.
func findAll(spans []span, hay string, n needle, at []int) []span {
	for off := 0; ; {
		i := strings.Index(hay[off:], n.text)
		if i < 0 {
			return spans
		}
		from, to := off+i, off+i+len(n.text)
		if at != nil {
			from, to = at[from], at[to-1]+1
		}
		spans = append(spans, span{from, to, n.name})
		off += i + len(n.text)
	}
}

// asciiLower lowercases ASCII letters only, so byte offsets stay those of s.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// redactValue redacts every string of a normalised details value (string, json.Number,
// bool, nil, []any, map[string]any), keys included, into a copy; *hit says whether anything
// was replaced.
func (r *Redactor) redactValue(v any, hit *bool) any {
	switch x := v.(type) {
	case string:
		return r.redactHit(x, hit)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.redactValue(e, hit)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			rk := r.redactHit(k, hit)
			if _, dup := out[rk]; dup {
				// Two keys that differed only by a secret stay two keys.
				rk = fmt.Sprintf("%s#%d", rk, len(out))
			}
			out[rk] = r.redactValue(e, hit)
		}
		return out
	}
	return v
}

func (r *Redactor) redactHit(s string, hit *bool) string {
	out := r.Redact(s)
	if len(out) != len(s) || out != s {
		*hit = true
	}
	return out
}

// redactRecord redacts the caller's text of a normalised record in place (its details and
// plugin reference; the event, decision and reason are fledge's names, the rest the
// writer's) and reports whether anything was replaced.
func (r *Redactor) redactRecord(n *Record) bool {
	if r.Empty() {
		return false
	}
	hit := false
	if n.Plugin != nil {
		p := *n.Plugin
		p.Name, p.Version = r.redactHit(p.Name, &hit), r.redactHit(p.Version, &hit)
		p.Source, p.ManifestDigest = r.redactHit(p.Source, &hit), r.redactHit(p.ManifestDigest, &hit)
		n.Plugin = &p
	}
	if n.Details != nil {
		n.Details, _ = r.redactValue(n.Details, &hit).(map[string]any)
	}
	return hit
}
