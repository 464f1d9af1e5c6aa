// SPDX-License-Identifier: MIT

package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// wire is the union of every field of every message type, so a line is decoded in one
// pass. Pointers mark fields whose presence matters; "default" differs in JSON type between
// prompt, confirm and select, so it stays raw until the type is known.
type wire struct {
	Type     string          `json:"type"`
	ID       json.RawMessage `json:"id"`
	Message  *string         `json:"message"`
	Default  json.RawMessage `json:"default"`
	Validate string          `json:"validate"`
	Options  []string        `json:"options"`
	Defaults []int           `json:"defaults"`
	Current  *float64        `json:"current"`
	Total    *float64        `json:"total"`
	Done     bool            `json:"done"`
	Level    string          `json:"level"`
	Text     *string         `json:"text"`
	Key      *string         `json:"key"`
	Value    json.RawMessage `json:"value"`
	Command  *string         `json:"command"`
	Cwd      string          `json:"cwd"`
	Timeout  *float64        `json:"timeout"`
	Keys     []string        `json:"keys"`
	Reason   string          `json:"reason"`
}

// fieldsOf lists the keys each type reads; nil means the type is unknown in that direction.
// The slow path uses it so that a wrong-typed key a type does not use cannot get its line
// skipped (the Rust fledge host ignores such keys too).
func fieldsOf(t string, inbound bool) []string {
	if inbound {
		switch t {
		case TypeResponse:
			return []string{"id", "value"}
		case TypeCancel:
			return []string{"id", "reason"}
		}
		return nil
	}
	switch t {
	case TypePrompt:
		return []string{"id", "message", "default", "validate"}
	case TypeConfirm:
		return []string{"id", "message", "default"}
	case TypeSelect:
		return []string{"id", "message", "options", "default"}
	case TypeMultiSelect:
		return []string{"id", "message", "options", "defaults"}
	case TypeProgress:
		return []string{"message", "current", "total", "done"}
	case TypeLog:
		return []string{"level", "message"}
	case TypeOutput:
		return []string{"text"}
	case TypeStore:
		return []string{"key", "value"}
	case TypeLoad:
		return []string{"id", "key"}
	case TypeExec:
		return []string{"id", "command", "cwd", "timeout"}
	case TypeMetadata:
		return []string{"id", "keys"}
	}
	return nil
}

func skip(kind LineErrorKind, typ string, id ID, format string, args ...any) *LineError {
	return &LineError{Kind: kind, Type: typ, ID: id, Detail: fmt.Sprintf(format, args...)}
}

// decodeLine decodes one non-blank line. Strings and raw ids are copied out of line, which
// the caller may reuse afterwards; except with fast, where an output or log message is
// fast's own and its strings point into line (see ReaderOptions.Transient).
func decodeLine(line []byte, inbound bool, fast *transientMessage) (*Message, *LineError) {
	if line[0] != '{' {
		// A stray print from the plugin, most likely; its text is not worth quoting back.
		return nil, skip(Malformed, "", nil, "not a JSON object")
	}
	if !inbound {
		if m, ok := decodeFastInto(line, fast); ok {
			return m, nil
		}
	}
	return decodeJSON(line, inbound)
}

// decodeJSON decodes a line that starts with '{' through encoding/json.
func decodeJSON(line []byte, inbound bool) (*Message, *LineError) {
	var w wire
	if err := json.Unmarshal(line, &w); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return nil, skip(Malformed, "", nil, "%s", syntaxDetail(line))
		}
		if lerr := decodeSlow(line, inbound, &w); lerr != nil {
			return nil, lerr
		}
	}
	if inbound && w.Type == TypeInit {
		return decodeInit(line)
	}
	return build(&w, inbound)
}

// decodeSlow re-decodes a line whose fast decode hit a wrong-typed field: only the keys the
// message's type uses are decoded, so the error (if any) is about a field that matters.
func decodeSlow(line []byte, inbound bool, w *wire) *LineError {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return skip(Malformed, "", nil, "%s", syntaxDetail(line))
	}
	rawType, ok := lookupFold(obj, "type")
	if !ok || string(rawType) == "null" {
		return skip(UnknownType, "", nil, "no message type")
	}
	var typ string
	if err := json.Unmarshal(rawType, &typ); err != nil {
		return skip(Malformed, "", nil, "field \"type\": expected string, got %s", jsonKind(rawType))
	}
	if typ == TypeInit && inbound {
		*w = wire{Type: typ}
		return nil
	}
	fields := fieldsOf(typ, inbound)
	if fields == nil {
		id, _ := usableID(obj["id"])
		return skip(UnknownType, typ, id, "")
	}
	kept := make(map[string]json.RawMessage, len(fields)+1)
	kept["type"] = rawType
	for k, v := range obj {
		for _, f := range fields {
			if strings.EqualFold(k, f) {
				kept[f] = v
			}
		}
	}
	filtered, err := json.Marshal(kept)
	if err != nil {
		return skip(Malformed, typ, nil, "%v", err)
	}
	*w = wire{}
	if err := json.Unmarshal(filtered, w); err != nil {
		var id ID
		if raw, ok := kept["id"]; ok {
			id, _ = usableID(raw)
		}
		return skip(Malformed, typ, id, "%s", typeErrDetail(err))
	}
	return nil
}

func lookupFold(obj map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	if v, ok := obj[key]; ok {
		return v, true
	}
	for k, v := range obj {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

func decodeInit(line []byte) (*Message, *LineError) {
	var in Init
	if err := json.Unmarshal(line, &in); err != nil {
		return nil, skip(Malformed, TypeInit, nil, "%s", typeErrDetail(err))
	}
	if in.Protocol == "" {
		return nil, skip(Invalid, TypeInit, nil, "protocol is required")
	}
	if in.Args == nil {
		in.Args = []string{}
	}
	return &Message{Type: TypeInit, Init: &in}, nil
}

// usableID checks a request id: a non-empty JSON string or a JSON number, valid UTF-8, at
// most MaxIDLen bytes. The raw bytes are kept so the reply echoes them exactly.
func usableID(raw json.RawMessage) (ID, string) {
	switch {
	case len(raw) == 0:
		return nil, "id is missing"
	case len(raw) > MaxIDLen:
		return nil, fmt.Sprintf("id longer than %d bytes", MaxIDLen)
	case raw[0] == '"':
		if len(raw) == 2 {
			return nil, "id is an empty string"
		}
		if !utf8.Valid(raw) {
			return nil, "id is not valid UTF-8"
		}
		return raw, ""
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		return raw, ""
	}
	return nil, "id is " + jsonKind(raw) + ", not a string or number"
}

func build(w *wire, inbound bool) (*Message, *LineError) {
	t := w.Type
	if t == "" {
		return nil, skip(UnknownType, "", nil, "")
	}
	if fieldsOf(t, inbound) == nil {
		// The id, when usable, goes with it: the host's warning about an orphaned
		// response names the id it carried.
		id, _ := usableID(w.ID)
		return nil, skip(UnknownType, t, id, "")
	}
	var id ID
	if RequiresID(t) || t == TypeResponse {
		var why string
		if id, why = usableID(w.ID); id == nil {
			return nil, skip(MissingID, t, nil, "%s", why)
		}
	}
	m := &Message{Type: t}
	var le *LineError
	switch t {
	case TypePrompt, TypeConfirm, TypeSelect, TypeMultiSelect:
		le = buildQuestion(m, w, id)
	default:
		le = buildOther(m, w, id)
	}
	if le != nil {
		return nil, le
	}
	return m, nil
}

// bodyFault makes the errors of a message whose type and id are known, so each carries
// them for the host's warning.
type bodyFault struct {
	t  string
	id ID
}

// invalid is a message missing a required field or with a value out of range.
func (f bodyFault) invalid(format string, args ...any) *LineError {
	return skip(Invalid, f.t, f.id, format, args...)
}

// malformed is a field of the wrong JSON type.
func (f bodyFault) malformed(field string, raw json.RawMessage, want string) *LineError {
	return skip(Malformed, f.t, f.id, "field %q: expected %s, got %s", field, want, jsonKind(raw))
}

// buildQuestion fills m from a question to the user (prompt, confirm, select,
// multi_select), the messages whose default must match their kind of answer.
func buildQuestion(m *Message, w *wire, id ID) *LineError {
	f := bodyFault{m.Type, id}
	switch m.Type {
	case TypePrompt:
		if w.Message == nil {
			return f.invalid("message is required")
		}
		p := &Prompt{ID: id, Message: *w.Message, Validate: w.Validate}
		if !isNull(w.Default) {
			var s string
			if json.Unmarshal(w.Default, &s) != nil {
				return f.malformed("default", w.Default, "string")
			}
			p.Default = &s
		}
		m.Prompt = p
	case TypeConfirm:
		if w.Message == nil {
			return f.invalid("message is required")
		}
		c := &Confirm{ID: id, Message: *w.Message}
		if !isNull(w.Default) {
			var b bool
			if json.Unmarshal(w.Default, &b) != nil {
				return f.malformed("default", w.Default, "boolean")
			}
			c.Default = &b
		}
		m.Confirm = c
	case TypeSelect:
		if w.Message == nil {
			return f.invalid("message is required")
		}
		if len(w.Options) == 0 {
			return f.invalid("options are required and must not be empty")
		}
		s := &Select{ID: id, Message: *w.Message, Options: w.Options}
		if !isNull(w.Default) {
			var d int
			if json.Unmarshal(w.Default, &d) != nil {
				return f.malformed("default", w.Default, "integer index")
			}
			if d < 0 || d >= len(w.Options) {
				return f.invalid("default index %d out of range (%d options)", d, len(w.Options))
			}
			s.Default = &d
		}
		m.Select = s
	case TypeMultiSelect:
		if w.Message == nil {
			return f.invalid("message is required")
		}
		if w.Options == nil {
			return f.invalid("options are required")
		}
		for _, d := range w.Defaults {
			if d < 0 || d >= len(w.Options) {
				return f.invalid("default index %d out of range (%d options)", d, len(w.Options))
			}
		}
		m.MultiSelect = &MultiSelect{ID: id, Message: *w.Message, Options: w.Options, Defaults: w.Defaults}
	}
	return nil
}

// buildOther fills m from any message that is not a question.
func buildOther(m *Message, w *wire, id ID) *LineError {
	t := m.Type
	f := bodyFault{t, id}
	switch t {
	case TypeResponse:
		val := w.Value
		if len(val) == 0 {
			val = json.RawMessage("null")
		}
		m.Response = &InboundResponse{ID: id, Value: val}
	case TypeCancel:
		c := &Cancel{Type: TypeCancel, Reason: w.Reason}
		if len(w.ID) > 0 && string(w.ID) != "null" {
			cid, why := usableID(w.ID)
			if cid == nil {
				return skip(MissingID, t, nil, "%s", why)
			}
			c.ID = cid
		}
		m.Cancel = c
	case TypeProgress:
		p := &Progress{Current: w.Current, Total: w.Total, Done: w.Done}
		if w.Message != nil {
			p.Message = *w.Message
		}
		m.Progress = p
	case TypeLog:
		if w.Message == nil {
			return f.invalid("message is required")
		}
		m.Log = &Log{Level: w.Level, Message: *w.Message}
	case TypeOutput:
		if w.Text == nil {
			return f.invalid("text is required")
		}
		m.Output = &Output{Text: *w.Text}
	case TypeStore:
		if w.Key == nil {
			return f.invalid("key is required")
		}
		if isNull(w.Value) {
			return f.invalid("value is required")
		}
		var v string
		if json.Unmarshal(w.Value, &v) != nil {
			return f.malformed("value", w.Value, "string")
		}
		m.Store = &Store{Key: *w.Key, Value: v}
	case TypeLoad:
		if w.Key == nil {
			return f.invalid("key is required")
		}
		m.Load = &Load{ID: id, Key: *w.Key}
	case TypeExec:
		if w.Command == nil || *w.Command == "" {
			return f.invalid("command is required")
		}
		m.Exec = &Exec{ID: id, Command: *w.Command, Cwd: w.Cwd, Timeout: w.Timeout}
	case TypeMetadata:
		if w.Keys == nil {
			return f.invalid("keys are required")
		}
		m.Metadata = &Metadata{ID: id, Keys: w.Keys}
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// jsonKind names the JSON type of a raw value for error messages.
func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// syntaxDetail describes why line is not valid JSON, without echoing the line itself.
func syntaxDetail(line []byte) string {
	var v any
	err := json.Unmarshal(line, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	}
	if err != nil {
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "invalid JSON"
}

// typeErrDetail rewords a decoding error in JSON terms instead of Go type names.
func typeErrDetail(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Sprintf("field %q: expected %s, got %s", field, goKind(te.Type), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func goKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.String()
}
