// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every common form of a registered value is replaced, wherever it sits in a text: the
// value, its case variants, URL escapes, hex, base64 and base32 of any text around it
// (HTTP Basic "user:VALUE", "VALUE:"), and in a DNS name split across labels. Text without
// a value is left alone, and a value under MinSecretBytes is refused.
func TestRedactorForms(t *testing.T) {
	r := NewRedactor()
	const v = "Tok3n/Val+ue=9f3?"
	require.NoError(t, r.Add("TOKEN", v))
	b := []byte(v)
	b32 := base32.StdEncoding.WithPadding(base32.NoPadding)
	forms := map[string]string{
		"value": v, "lower": strings.ToLower(v), "upper": strings.ToUpper(v), "mixed": "tOK3N/vAL+UE=9F3?",
		"query": url.QueryEscape(v), "path": url.PathEscape(v), "hex": hex.EncodeToString(b),
		"HEX": strings.ToUpper(hex.EncodeToString(b)),
	}
	for _, pre := range []string{"", "x:", "ab:", "user1:", "u"} {
		for _, post := range []string{"", ":", "::x"} {
			in := append(append([]byte(pre), b...), post...)
			forms["base64 "+pre+"V"+post] = base64.StdEncoding.EncodeToString(in)
			forms["base64url "+pre+"V"+post] = base64.URLEncoding.EncodeToString(in)
			forms["rawbase64 "+pre+"V"+post] = base64.RawStdEncoding.EncodeToString(in)
			forms["base32 "+pre+"V"+post] = b32.EncodeToString(in)
			forms["base32hex lower "+pre+"V"+post] = strings.ToLower(base32.HexEncoding.EncodeToString(in))
		}
	}
	for what, f := range forms {
		got := r.Redact("before " + f + " after")
		assert.Contains(t, got, "[secret:TOKEN]", what)
		assert.True(t, strings.HasPrefix(got, "before ") && strings.HasSuffix(got, " after"), "%s: %q", what, got)
		assert.NotContains(t, got, f, what)
	}
	// A name split across DNS labels, lowercased; hex split too.
	h := hex.EncodeToString(b)
	for _, name := range []string{strings.ToLower(v[:5] + "." + v[5:]), h[:10] + "." + h[10:20] + "." + h[20:]} {
		assert.Equal(t, "[secret:TOKEN].example.test", r.Redact(name+".example.test"), name)
	}
	for _, plain := range []string{"", "exec_decision", "/usr/bin/python3", "tok3n", "a.b.c.example.test"} {
		assert.Equal(t, plain, r.Redact(plain))
	}
	assert.Equal(t, "x[secret:TOKEN][secret:TOKEN]y", r.Redact("x"+v+strings.ToLower(v)+"y"))
	// Overlapping values become one replacement, named for the first.
	require.NoError(t, r.Add("OTHER", "?after-the-token"))
	assert.Equal(t, "x[secret:TOKEN]y", r.Redact("x"+v+"after-the-token"+"y"))

	assert.ErrorIs(t, r.Add("SHORT", "abc"), ErrSecretTooShort)
	assert.Equal(t, "abc abc", r.Redact("abc abc"), "a refused value is not redacted")
	var none *Redactor
	assert.Equal(t, v, none.Redact(v))
}

// A record carrying a secret in its details (values, keys, nested lists) or its plugin
// reference is written with [secret:NAME] in their place; the chain verifies, and what the
// caller's record holds after Append is what was written.
func TestLogRedactsSecrets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	r := NewRedactor()
	l, err := Open(path, Options{Redact: r})
	require.NoError(t, err)
	defer l.Close()
	const v = "s3cr3t-value-XYZ"
	require.NoError(t, r.Add("API_KEY", v))
	rec := &Record{
		Session: "s", Event: EventExecDecision, Decision: Allow, Reason: "ok",
		Plugin: &PluginRef{Name: "p", Source: "/src/" + v},
		Details: map[string]any{
			"command": "curl -H 'Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+v)) + "'",
			"argv":    []any{"sh", "-c", "echo " + v},
			"k-" + v:  map[string]any{"nested": []string{strings.ToUpper(v)}},
			"long":    strings.Repeat("a", 5000) + v,
		},
	}
	require.NoError(t, l.Append(rec, true))
	require.NoError(t, l.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, strings.ToLower(string(data)), strings.ToLower(v))
	assert.NotContains(t, string(data), base64.StdEncoding.EncodeToString([]byte("me:" + v))[4:])
	assert.Contains(t, string(data), `"k-[secret:API_KEY]"`)
	assert.Contains(t, string(data), `/src/[secret:API_KEY]`)
	assert.Equal(t, "/src/[secret:API_KEY]", rec.Plugin.Source)
	assert.Equal(t, []any{"sh", "-c", "echo [secret:API_KEY]"}, rec.Details["argv"])
	rep, err := Verify(path)
	require.NoError(t, err)
	assert.True(t, rep.OK, "%+v", rep)
}
