// SPDX-License-Identifier: MIT

package core

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/sandbox"
)

// maxHostBundle bounds the host bundle fledge copies.
const maxHostBundle = 16 << 20

// caEnv are the variables by which the usual TLS stacks take a CA bundle: Go and OpenSSL
// (python's ssl, ruby), Node (on top of its own), requests, curl and git.
var caEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// trustSessionCA lets the plugin and its commands trust the certificates fledge presents
// for the destinations it reads (bound secrets, HTTP rules), with no change to the plugin:
// a bundle of the host's trusted CAs plus the session's CA (never its key) in a file they
// may read, named by the variables TLS stacks read and shown at the system bundle paths
// of their private filesystem view. It also gives git a credential helper
// that answers with a bound secret's placeholder for its destinations, so a clone or push
// over https carries it to fledge, which puts the value in. Nothing when the session has
// no such destination.
func trustSessionCA(p *policy.Profile, environ []string, placeholders map[string]string) {
	s, ok := p.Plugin.Egress.(*egress.Session)
	if !ok || s == nil {
		return
	}
	ca, err := s.CA()
	if err != nil || ca == nil {
		return // the run's network fails to start with the CA's error
	}
	dir, err := os.MkdirTemp("", "fledge-ca-")
	if err != nil {
		return
	}
	bundle := filepath.Join(dir, "ca.pem")
	data := append(hostBundle(environ), '\n')
	data = append(data, ca.PEM()...)
	if err := os.WriteFile(bundle, data, 0o644); err != nil || os.Chmod(dir, 0o755) != nil {
		os.RemoveAll(dir)
		return
	}
	s.OnClose(func() { os.RemoveAll(dir) })
	set := map[string]string{}
	for _, k := range caEnv {
		set[k] = bundle
	}
	for k, v := range gitCredentialEnv(s.Policy, placeholders) {
		set[k] = v
	}
	for _, spec := range []*sandbox.Spec{&p.Plugin, &p.Exec, &p.Legacy} {
		spec.Access.ReadOnly = append(spec.Access.ReadOnly, dir)
		spec.Env = setEnv(spec.Env, set)
		// Also at the system bundle paths, for programs that read no variable (OpenSSL's
		// defaults); only where the run has a private filesystem view.
		spec.TrustBundle = bundle
	}
}

// hostBundle is the host's CA bundle (the user's SSL_CERT_FILE first, as Go and OpenSSL
// read it), or nothing when none is found.
func hostBundle(environ []string) []byte {
	paths := sandbox.SystemCABundles
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "SSL_CERT_FILE="); ok && v != "" {
			paths = append([]string{v}, paths...)
		}
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		b := make([]byte, maxHostBundle)
		n, _ := f.Read(b)
		f.Close()
		if n > 0 {
			return b[:n]
		}
	}
	return nil
}

// gitCredentialEnv configures git (through GIT_CONFIG_COUNT, no file) with a credential
// helper per https destination of a bound secret, answering its placeholder.
func gitCredentialEnv(pol *egress.Policy, placeholders map[string]string) map[string]string {
	out := map[string]string{}
	n := 0
	for _, sec := range pol.Secrets {
		if placeholders[sec.Name] == "" {
			continue
		}
		for _, d := range sec.Dests {
			if d.Wildcard || d.Host == "" || d.PortLo != d.PortHi {
				continue
			}
			url := "https://" + d.Host
			if d.PortLo != 443 {
				url += ":" + strconv.Itoa(int(d.PortLo))
			}
			out[fmt.Sprintf("GIT_CONFIG_KEY_%d", n)] = "credential." + url + ".helper"
			out[fmt.Sprintf("GIT_CONFIG_VALUE_%d", n)] = fmt.Sprintf(`!f() { test "$1" = get && printf 'username=x-access-token\npassword=%%s\n' "$%s"; }; f`, sec.Name)
			n++
		}
	}
	if n > 0 {
		out["GIT_CONFIG_COUNT"] = strconv.Itoa(n)
	}
	return out
}

// setEnv sets the variables of set in env (KEY=VALUE entries), replacing any of the same
// name.
func setEnv(env []string, set map[string]string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}
