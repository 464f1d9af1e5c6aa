// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// ZeroHash is the prev_hash of the first record of a chain.
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

const (
	hashKey     = `,"hash":"`
	emptyHash   = `,"hash":""}`
	hashTailLen = len(hashKey) + 64 + len(`"}`) // `,"hash":"<64 hex>"}`
)

// BreakKind names how a log is broken.
type BreakKind string

const (
	BreakEdited        BreakKind = "edited"         // a record's hash does not match its content
	BreakDeleted       BreakKind = "deleted"        // records are missing (seq gap, chain broken)
	BreakReordered     BreakKind = "reordered"      // seq goes backwards, or a missing record appears later
	BreakTornTail      BreakKind = "torn_tail"      // the last line is partial: a write cut short by a crash
	BreakBadJSON       BreakKind = "bad_json"       // a line that is not a fledge record
	BreakChainMismatch BreakKind = "chain_mismatch" // prev_hash does not match the previous record
	// BreakTruncated: the log is shorter than its head or its witness says it was (records
	// deleted from the end), or a log_truncated record says a writer found it so.
	BreakTruncated BreakKind = "truncated"
	BreakBadHead   BreakKind = "bad_head" // the head file exists but no slot of it is valid
)

// lineError says why one line is not a valid record.
type lineError struct {
	kind   BreakKind
	detail string
}

func (e *lineError) Error() string { return string(e.kind) + ": " + e.detail }

// marshalCompact encodes v the canonical way: encoding/json, struct field order, sorted map
// keys, no HTML escaping, no trailing newline.
func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// body is the canonical JSON of r without its hash member: the bytes the hash covers.
func body(r *Record) ([]byte, error) {
	c := *r
	c.Hash = ""
	b, err := marshalCompact(&c)
	if err != nil {
		return nil, err
	}
	// Hash is the last field of Record, so it is the last member of the object.
	if !bytes.HasSuffix(b, []byte(emptyHash)) {
		return nil, errors.New("audit: internal: hash is not the last member of a record")
	}
	b = b[:len(b)-len(emptyHash)]
	return append(b, '}'), nil
}

// normalize returns a copy of r as it reads back from the log: details become plain JSON
// values (json.Number, string, bool, nil, []any, map[string]any) and invalid UTF-8 becomes
// U+FFFD. Encoding the result is a fixed point, which is what makes the hash recomputable
// from the stored line alone.
func normalize(r *Record) (*Record, error) {
	c := *r
	c.Hash = ""
	b, err := marshalCompact(&c)
	if err != nil {
		return nil, err
	}
	return decodeRecord(b)
}

func decodeRecord(b []byte) (*Record, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out Record
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("trailing data after the record")
	}
	return &out, nil
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// withHash turns a canonical body into the stored line (without newline).
func withHash(body []byte, hash string) []byte {
	line := make([]byte, 0, len(body)+hashTailLen)
	line = append(line, body[:len(body)-1]...)
	line = append(line, hashKey...)
	line = append(line, hash...)
	return append(line, '"', '}')
}

// JSONLine returns r as the log stores it (canonical JSON with its hash, no newline). For a
// record that verifies this is byte-identical to its stored line.
func JSONLine(r *Record) ([]byte, error) {
	b, err := body(r)
	if err != nil {
		return nil, err
	}
	return withHash(b, r.Hash), nil
}

func isLowerHex(s []byte) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// splitHash splits a stored line into the hashed body and the claimed hash, or returns
// ok=false when the line does not end in a well-formed hash member.
func splitHash(line []byte) (bodyBytes []byte, hash string, ok bool) {
	if len(line) < hashTailLen+2 || line[len(line)-1] != '}' || line[len(line)-2] != '"' {
		return nil, "", false
	}
	tail := line[len(line)-hashTailLen:]
	if !bytes.HasPrefix(tail, []byte(hashKey)) {
		return nil, "", false
	}
	h := tail[len(hashKey) : len(hashKey)+64]
	if !isLowerHex(h) {
		return nil, "", false
	}
	b := make([]byte, 0, len(line)-hashTailLen+1)
	b = append(b, line[:len(line)-hashTailLen]...)
	return append(b, '}'), string(h), true
}

// parseLine decodes one stored line (without newline) and checks it against its own hash
// and the canonical form. It does not look at the chain.
func parseLine(line []byte) (*Record, *lineError) {
	if !json.Valid(line) {
		return nil, &lineError{BreakBadJSON, "not valid JSON"}
	}
	r, err := decodeRecord(line)
	if err != nil {
		return nil, &lineError{BreakBadJSON, "not a fledge record: " + err.Error()}
	}
	if r.Schema != SchemaVersion {
		return nil, &lineError{BreakBadJSON, fmt.Sprintf("schema %d is not supported (want %d)", r.Schema, SchemaVersion)}
	}
	b, h, ok := splitHash(line)
	if !ok {
		return nil, &lineError{BreakEdited, "the hash member is missing, malformed or not last"}
	}
	if got := hashOf(b); got != h {
		return nil, &lineError{BreakEdited, fmt.Sprintf("content hashes to %s but the record claims %s", got, h)}
	}
	canon, err := body(r)
	if err != nil || !bytes.Equal(canon, b) {
		return nil, &lineError{BreakEdited, "record is not in canonical form (hash was recomputed over a hand-made line)"}
	}
	r.Hash = h
	return r, nil
}
