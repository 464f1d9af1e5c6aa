// SPDX-License-Identifier: MIT

package stub

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pipeWith(t testing.TB, data []byte) *os.File {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	go func() { _, _ = w.Write(data); w.Close() }()
	return r
}

func TestReadPolicy(t *testing.T) {
	good, _ := json.Marshal(&Policy{Path: "/bin/sh", Args: []string{"sh"}})
	for _, tc := range []struct {
		name string
		data []byte
		err  string
	}{
		{"ok", good, ""},
		{"garbage", []byte("{"), "decode"},
		{"empty program", []byte(`{"path":"","args":[]}`), "empty program"},
		{"too large", bytes.Repeat([]byte(" "), MaxPolicyBytes+10), "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := readPolicy(pipeWith(t, tc.data))
			if tc.err == "" {
				require.NoError(t, err)
				assert.Equal(t, "/bin/sh", p.Path)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestLookPath(t *testing.T) {
	p, err := lookPath(&Policy{Path: "sh", Env: []string{"PATH=relative:/nonexistent:/bin"}})
	require.NoError(t, err)
	assert.Equal(t, "/bin/sh", p)
	_, err = lookPath(&Policy{Path: "sh", Env: []string{"PATH=relative"}})
	require.Error(t, err)
	p, err = lookPath(&Policy{Path: "./x"})
	require.NoError(t, err)
	assert.Equal(t, "./x", p)
}

func TestParseStepError(t *testing.T) {
	assert.Equal(t, &StepError{Step: "landlock", Msg: "boom"}, parseStepError([]byte("landlock\x00boom")))
	assert.Equal(t, "stub", parseStepError([]byte("no separator\n")).Step)
	assert.True(t, strings.HasPrefix((&StepError{Step: "a", Msg: "b"}).Error(), "stub: a"))
}

// FuzzReadPolicy: any bytes on the policy fd give a policy or an error, never a panic,
// and an accepted policy always names a program.
func FuzzReadPolicy(f *testing.F) {
	good, _ := json.Marshal(&Policy{Path: "/bin/sh", Args: []string{"sh", "-c", "true"}, Landlock: &Landlock{ABI: 7}})
	f.Add(good)
	f.Add([]byte(`{"path":"x","args":["x"],"nofile":-1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := readPolicy(pipeWith(t, data))
		if err == nil && (p.Path == "" || len(p.Args) == 0) {
			t.Fatalf("accepted a policy without a program: %q", data)
		}
	})
}
