// SPDX-License-Identifier: MIT

package protocol

import (
	"bytes"
	"encoding/json"
)

// The wire types carry no Type field for outbound messages (and callers may leave it empty on
// the inbound ones), so each type's MarshalJSON writes its own "type": whatever encodes a
// message, it cannot go out without its discriminator.

// marshalTyped encodes v (a defined type without methods) with "type" first and without
// HTML escaping, so the text on the wire is the text the plugin sent.
func marshalTyped(typ string, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	body := bytes.TrimSpace(buf.Bytes())
	if typ == "" {
		return body, nil
	}
	out := make([]byte, 0, len(body)+len(typ)+12)
	out = append(out, `{"type":`...)
	out, _ = appendJSONString(out, typ)
	if len(body) > 2 { // not "{}"
		out = append(out, ',')
	}
	out = append(out, body[1:]...)
	return out, nil
}

func appendJSONString(dst []byte, s string) ([]byte, error) {
	b, err := json.Marshal(s)
	return append(dst, b...), err
}

type (
	promptNoMethods      Prompt
	confirmNoMethods     Confirm
	selectNoMethods      Select
	multiSelectNoMethods MultiSelect
	progressNoMethods    Progress
	logNoMethods         Log
	outputNoMethods      Output
	storeNoMethods       Store
	loadNoMethods        Load
	execNoMethods        Exec
	metadataNoMethods    Metadata
	responseNoMethods    Response
	inResponseNoMethods  InboundResponse
	cancelNoMethods      Cancel
	initNoMethods        Init
)

func (m Prompt) MarshalJSON() ([]byte, error) {
	return marshalTyped(TypePrompt, promptNoMethods(m))
}
func (m Confirm) MarshalJSON() ([]byte, error) {
	return marshalTyped(TypeConfirm, confirmNoMethods(m))
}
func (m Select) MarshalJSON() ([]byte, error) {
	return marshalTyped(TypeSelect, selectNoMethods(m))
}
func (m MultiSelect) MarshalJSON() ([]byte, error) {
	return marshalTyped(TypeMultiSelect, multiSelectNoMethods(m))
}
func (m Progress) MarshalJSON() ([]byte, error) {
	return marshalTyped(TypeProgress, progressNoMethods(m))
}
func (m Log) MarshalJSON() ([]byte, error) { return marshalTyped(TypeLog, logNoMethods(m)) }
func (m Output) MarshalJSON() ([]byte, error) {
	return marshalTyped(TypeOutput, outputNoMethods(m))
}
func (m Store) MarshalJSON() ([]byte, error) { return marshalTyped(TypeStore, storeNoMethods(m)) }
func (m Load) MarshalJSON() ([]byte, error)  { return marshalTyped(TypeLoad, loadNoMethods(m)) }
func (m Exec) MarshalJSON() ([]byte, error)  { return marshalTyped(TypeExec, execNoMethods(m)) }
func (m Metadata) MarshalJSON() ([]byte, error) {
	return marshalTyped(TypeMetadata, metadataNoMethods(m))
}

// MarshalJSON writes a response; Type is always "response" whatever the field holds.
func (m Response) MarshalJSON() ([]byte, error) {
	m.Type = TypeResponse
	return marshalTyped("", responseNoMethods(m))
}

// MarshalJSON re-encodes a response as a plugin received it (used by fakes and tests).
func (m InboundResponse) MarshalJSON() ([]byte, error) {
	if len(m.Value) == 0 {
		m.Value = json.RawMessage("null")
	}
	return marshalTyped(TypeResponse, inResponseNoMethods(m))
}

// MarshalJSON writes a cancel; Type is always "cancel" and an empty ID is left out (a
// session-wide cancel).
func (m Cancel) MarshalJSON() ([]byte, error) {
	m.Type = TypeCancel
	return marshalTyped("", cancelNoMethods(m))
}

// MarshalJSON writes init; Type is always "init" and Args is never null.
func (m Init) MarshalJSON() ([]byte, error) {
	m.Type = TypeInit
	if m.Args == nil {
		m.Args = []string{}
	}
	return marshalTyped("", initNoMethods(m))
}

// NewResponse returns a response to the request with the given id. id must be the raw id
// the plugin sent (Message.RequestID), so it is echoed byte for byte.
func NewResponse(id ID, value any) Response {
	return Response{Type: TypeResponse, ID: id, Value: value}
}

// NewCancel returns a cancel for one request (id set) or for the whole session (id nil).
func NewCancel(id ID, reason string) Cancel {
	return Cancel{Type: TypeCancel, ID: id, Reason: reason}
}

// StringID returns the ID for a string id, as the SDK allocates them.
func StringID(s string) ID {
	b, _ := json.Marshal(s)
	return ID(b)
}

// RequestID returns the id of an id-bearing message (a request, response or cancel), or nil.
func (m *Message) RequestID() ID {
	switch {
	case m.Prompt != nil:
		return m.Prompt.ID
	case m.Confirm != nil:
		return m.Confirm.ID
	case m.Select != nil:
		return m.Select.ID
	case m.MultiSelect != nil:
		return m.MultiSelect.ID
	case m.Load != nil:
		return m.Load.ID
	case m.Exec != nil:
		return m.Exec.ID
	case m.Metadata != nil:
		return m.Metadata.ID
	case m.Response != nil:
		return m.Response.ID
	case m.Cancel != nil:
		return m.Cancel.ID
	}
	return nil
}

// Payload returns the one non-nil payload (a pointer to Prompt, Log, Init, ...), or nil for
// a message without one. Writer.Send(m.Payload()) re-encodes the message.
func (m *Message) Payload() any {
	switch {
	case m.Prompt != nil:
		return m.Prompt
	case m.Confirm != nil:
		return m.Confirm
	case m.Select != nil:
		return m.Select
	case m.MultiSelect != nil:
		return m.MultiSelect
	case m.Progress != nil:
		return m.Progress
	case m.Log != nil:
		return m.Log
	case m.Output != nil:
		return m.Output
	case m.Store != nil:
		return m.Store
	case m.Load != nil:
		return m.Load
	case m.Exec != nil:
		return m.Exec
	case m.Metadata != nil:
		return m.Metadata
	case m.Response != nil:
		return m.Response
	case m.Cancel != nil:
		return m.Cancel
	case m.Init != nil:
		return m.Init
	}
	return nil
}
