// SPDX-License-Identifier: MIT

package protocol

import (
	"unicode/utf8"
	"unsafe"
)

// decodeFast decodes the two messages a chatty plugin sends most, output and log, without
// reflection: encoding/json's reflective decode was half of the host's CPU per message (make
// bench, row 2). It accepts a strict subset of JSON — an object whose keys are exactly
// "type", "text", "level" or "message", each at most once, with string values holding valid
// UTF-8, no control characters and no surrogate escapes — and reports ok=false for
// anything else, which then takes the encoding/json path. Within that subset both paths
// give the same message (FuzzDecodeFast checks it), so the fast path changes speed only.
func decodeFast(line []byte) (*Message, bool) { return decodeFastInto(line, nil) }

// transientMessage is the message a Reader with ReaderOptions.Transient returns for every
// fast-path line: one per Reader, overwritten by the next line, so a chatty plugin's output
// leaves no garbage behind (make bench, row 2b: the heap stays at its live size).
type transientMessage struct {
	m Message
	o Output
	l Log
	// scratch holds the strings that had escapes; bounded by maxTransientScratch between
	// lines so one long line does not pin its size for the rest of the session.
	scratch []byte
}

// maxTransientScratch is the largest scratch kept from one line to the next; a larger one
// (a line with a long escaped string) is dropped after its line and made again if needed.
const maxTransientScratch = 16 << 10

// reset readies t for the next line: the previous line's strings are no longer valid.
func (t *transientMessage) reset() {
	if cap(t.scratch) > maxTransientScratch {
		t.scratch = nil
	}
	t.scratch = t.scratch[:0]
}

// decodeFastInto is decodeFast; with t, the message is t's own and its strings point into
// line and t.scratch (valid until the caller reuses either), with nil, all is copied.
func decodeFastInto(line []byte, t *transientMessage) (*Message, bool) {
	p := fastParser{b: line, t: t}
	if !p.byte('{') {
		return nil, false
	}
	var typ, text, level, message string
	var seen [4]bool
	p.ws()
	for {
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		p.ws()
		if !p.byte(':') {
			return nil, false
		}
		p.ws()
		val, ok := p.str()
		if !ok {
			return nil, false
		}
		var dst *string
		switch key {
		case fkType:
			dst = &typ
		case fkText:
			dst = &text
		case fkLevel:
			dst = &level
		case fkMessage:
			dst = &message
		}
		if seen[key] {
			return nil, false // duplicate key: encoding/json keeps the last; leave it to it
		}
		seen[key] = true
		*dst = val
		p.ws()
		if p.byte(',') {
			p.ws()
			continue
		}
		if !p.byte('}') || p.i != len(p.b) {
			return nil, false
		}
		break
	}
	if !seen[fkType] {
		return nil, false
	}
	switch typ {
	case TypeOutput:
		if !seen[fkText] {
			return nil, false
		}
		if t != nil {
			t.o = Output{Text: text}
			t.m = Message{Type: TypeOutput, Output: &t.o}
			return &t.m, true
		}
		// One allocation for the message and its payload.
		x := &struct {
			m Message
			o Output
		}{}
		x.o.Text = text
		x.m.Type, x.m.Output = TypeOutput, &x.o
		return &x.m, true
	case TypeLog:
		if !seen[fkMessage] {
			return nil, false
		}
		if t != nil {
			t.l = Log{Level: level, Message: message}
			t.m = Message{Type: TypeLog, Log: &t.l}
			return &t.m, true
		}
		x := &struct {
			m Message
			l Log
		}{}
		x.l.Level, x.l.Message = level, message
		x.m.Type, x.m.Log = TypeLog, &x.l
		return &x.m, true
	}
	return nil, false
}

type fastKey int

const (
	fkType fastKey = iota
	fkText
	fkLevel
	fkMessage
)

type fastParser struct {
	b []byte
	i int
	t *transientMessage // nil: strings are copied out of b
}

// string turns b (a part of the line, or of the scratch once complete) into a string: a copy,
// or for a transient message the bytes themselves, valid as long as the message is.
func (p *fastParser) string(b []byte) string {
	if p.t == nil {
		return string(b)
	}
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// key reads a quoted key; only the four known keys, spelled exactly, are accepted (encoding/json
// matches keys case-insensitively; any other spelling goes to it).
func (p *fastParser) key() (fastKey, bool) {
	if !p.byte('"') {
		return 0, false
	}
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= 'a' && p.b[p.i] <= 'z' {
		p.i++
	}
	k := string(p.b[start:p.i]) // no allocation: the compiler turns the switch into compares
	if !p.byte('"') {
		return 0, false
	}
	switch k {
	case "type":
		return fkType, true
	case "text":
		return fkText, true
	case "level":
		return fkLevel, true
	case "message":
		return fkMessage, true
	}
	return 0, false
}

// str reads a JSON string value. Escapes \" \\ \/ \b \f \n \r \t and \uXXXX outside the
// surrogate range are decoded; a surrogate escape, a control character or invalid UTF-8
// gives up (encoding/json has rules of its own for those).
func (p *fastParser) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	var buf []byte // nil until the first escape
	bufStart := 0  // where this string starts in buf (the scratch of a transient message)
	high := false
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			raw := p.b[start:p.i]
			p.i++
			if high && !utf8.Valid(raw) {
				return "", false
			}
			if buf == nil {
				return p.string(raw), true
			}
			if p.t != nil {
				// Earlier strings of this line stay valid: append never writes where they
				// point (below len, or in the old array when it grows).
				p.t.scratch = buf
				return p.string(buf[bufStart:]), true
			}
			return string(buf), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if buf == nil {
				if p.t != nil {
					buf, bufStart = p.t.scratch, len(p.t.scratch)
					buf = append(buf, p.b[start:p.i]...)
				} else {
					buf = append(make([]byte, 0, p.i-start+16), p.b[start:p.i]...)
				}
			}
			if p.i+1 >= len(p.b) {
				return "", false
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := hex4(p.b, p.i)
				if !ok || (r >= 0xD800 && r <= 0xDFFF) {
					return "", false
				}
				p.i += 4
				buf = utf8.AppendRune(buf, r)
			default:
				return "", false
			}
			continue
		default:
			if c >= utf8.RuneSelf {
				high = true
			}
			if buf != nil {
				buf = append(buf, c)
			}
		}
		p.i++
	}
	return "", false
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
