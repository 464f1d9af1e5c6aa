// SPDX-License-Identifier: MIT

package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzReader: no input panics the reader; every error is a *LineError or io.EOF; every
// message has exactly its payload, re-encodes to one valid JSON line, and that line decodes
// again to a message that encodes identically.
func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"type":"prompt","id":"1","message":"m","default":"d"}`+"\n"+`{"type":"output","text":"x"}`), false, uint16(0))
	f.Add([]byte(`{"type":"response","id":1,"value":{"code":0}}`+"\r\n"+`{"type":"cancel","reason":"timeout"}`), true, uint16(0))
	f.Add([]byte("{\"type\":\"log\",\"message\":\"\xff\"}\n\n  \nnot json\n"), false, uint16(16))
	f.Fuzz(func(t *testing.T, data []byte, inbound bool, maxLine uint16) {
		r := NewReader(bytes.NewReader(data), ReaderOptions{MaxLine: int(maxLine), Inbound: inbound})
		for i := 0; ; i++ {
			if i > len(data)+1 {
				t.Fatalf("more results than lines")
			}
			m, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				var le *LineError
				if !errors.As(err, &le) || !errors.Is(err, ErrSkipped) || le.Kind < TooLong || le.Kind > Invalid {
					t.Fatalf("unexpected error %T: %v", err, err)
				}
				continue
			}
			p := m.Payload()
			if p == nil || m.Type == "" || m.Line < 1 {
				t.Fatalf("message without payload/type/line: %+v", m)
			}
			line, err := Encode(p)
			if err != nil {
				t.Fatalf("re-encode %+v: %v", p, err)
			}
			if !json.Valid(line) || bytes.IndexByte(line, '\n') != len(line)-1 {
				t.Fatalf("re-encoded message is not one valid line: %q", line)
			}
			again, err := NewReader(bytes.NewReader(line), ReaderOptions{Inbound: inbound}).Next()
			if err != nil {
				t.Fatalf("re-decode %q: %v", line, err)
			}
			line2, err := Encode(again.Payload())
			if err != nil || !bytes.Equal(line, line2) {
				t.Fatalf("round trip differs:\n%q\n%q (%v)", line, line2, err)
			}
		}
		st := r.Stats()
		if st.BytesRead != int64(len(data)) {
			t.Fatalf("BytesRead %d, want %d", st.BytesRead, len(data))
		}
	})
}
