// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// normalizeFast is normalize without the encode and decode round trip, for the records
// every call writes: when r holds only values whose JSON encoding reads back as itself
// (valid UTF-8 strings, integers, bools, nil, lists and string-keyed objects of those), the
// plain copy is built directly, so sealing a record encodes it once instead of twice and
// never decodes it. Anything else (floats, json.Number, invalid UTF-8, structs, cycles,
// deeper nesting than the bounds keep) takes normalize, which is the definition: the two
// must agree byte for byte on what they both accept (TestNormalizeFastMatchesNormalize).
func normalizeFast(r *Record) (*Record, error) {
	if n, ok := plainRecord(r); ok {
		return n, nil
	}
	return normalize(r)
}

// plainWalkDepth stops the direct walk (and hands the record to normalize, which reports a
// cycle as an error) well past the depth the bounds keep.
const plainWalkDepth = maxDetailsDepth + 2

func plainRecord(r *Record) (*Record, bool) {
	c := *r
	c.Hash = ""
	for _, s := range []string{c.Session, c.Host, c.Event, string(c.Decision), c.Reason, c.PrevHash} {
		if !utf8.ValidString(s) {
			return nil, false
		}
	}
	if c.Plugin != nil {
		p := *c.Plugin
		if !utf8.ValidString(p.Name) || !utf8.ValidString(p.Version) || !utf8.ValidString(p.Source) || !utf8.ValidString(p.ManifestDigest) {
			return nil, false
		}
		c.Plugin = &p
	}
	if c.Sandbox != nil {
		s := *c.Sandbox
		if !utf8.ValidString(s.Mode) || !utf8.ValidString(s.CgroupMode) {
			return nil, false
		}
		c.Sandbox = &s
	}
	if c.Details != nil {
		// An empty object is left out of the encoding (omitempty) and reads back as nil.
		if len(c.Details) == 0 {
			c.Details = nil
		} else {
			d, ok := plainObject(c.Details, 0)
			if !ok {
				return nil, false
			}
			c.Details = d
		}
	}
	// The time reads back in UTC (the writer sets it so); anything else takes normalize.
	if c.Time.Location() != nil && c.Time.Location().String() != "UTC" {
		return nil, false
	}
	return &c, true
}

func plainObject(m map[string]any, depth int) (map[string]any, bool) {
	if depth > plainWalkDepth {
		return nil, false
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !utf8.ValidString(k) {
			return nil, false
		}
		pv, ok := plainValue(v, depth+1)
		if !ok {
			return nil, false
		}
		out[k] = pv
	}
	return out, true
}

// plainValue is v as it reads back from its JSON encoding, or false when that is not known
// without encoding it.
func plainValue(v any, depth int) (any, bool) {
	switch x := v.(type) {
	case nil:
		return nil, true
	case string:
		return x, utf8.ValidString(x)
	case bool:
		return x, true
	case int:
		return json.Number(strconv.FormatInt(int64(x), 10)), true
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), true
	case int32:
		return json.Number(strconv.FormatInt(int64(x), 10)), true
	case uint64:
		return json.Number(strconv.FormatUint(x, 10)), true
	case uint32:
		return json.Number(strconv.FormatUint(uint64(x), 10)), true
	case uint:
		return json.Number(strconv.FormatUint(uint64(x), 10)), true
	case map[string]any:
		if x == nil {
			return nil, true
		}
		return plainObject(x, depth)
	case []any:
		if x == nil {
			return nil, true
		}
		if depth > plainWalkDepth {
			return nil, false
		}
		out := make([]any, len(x))
		for i, e := range x {
			pe, ok := plainValue(e, depth+1)
			if !ok {
				return nil, false
			}
			out[i] = pe
		}
		return out, true
	case []string:
		if x == nil {
			return nil, true
		}
		out := make([]any, len(x))
		for i, e := range x {
			if !utf8.ValidString(e) {
				return nil, false
			}
			out[i] = e
		}
		return out, true
	}
	return nil, false
}
