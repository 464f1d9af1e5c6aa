// SPDX-License-Identifier: MIT

package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// CA is a plugin session's certificate authority: fledge terminates a program's TLS to a
// destination it must read (a bound secret goes there, or HTTP rules narrow it) with a
// certificate this CA signs. Its key exists only in fledge's memory and dies with the
// session; the certificate is name-constrained to those destinations, so even a copy of
// it vouches for nothing else to a client that checks constraints (Go, OpenSSL, NSS do).
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pem     []byte
	leafKey *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// maxLeaves bounds the certificates one session's CA keeps made.
const maxLeaves = 1024

// caLifetime is how long a session CA and its certificates are valid.
const caLifetime = 30 * 24 * time.Hour

// ErrNotCovered: a certificate was asked for a name the CA is not constrained to.
var ErrNotCovered = errors.New("the session CA does not cover this name")

// NewCA makes a session CA for the given host names ("*.example.org" patterns as their
// domain).
func NewCA(names []string) (*CA, error) {
	if len(names) == 0 {
		return nil, errors.New("a session CA needs at least one name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "fledge session CA " + hex.EncodeToString(id), Organization: []string{"fledge"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(caLifetime),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, leafKey: leafKey, leaves: map[string]*tls.Certificate{},
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// PEM is the CA's certificate (never its key).
func (c *CA) PEM() []byte { return c.pem }

// Leaf returns a certificate for name, signed by the CA (made once per name).
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[name]; ok {
		return l, nil
	}
	covered := false
	for _, d := range c.cert.PermittedDNSDomains {
		covered = covered || name == d || len(name) > len(d) && name[len(name)-len(d)-1:] == "."+d
	}
	if !covered {
		return nil, fmt.Errorf("%w: %s", ErrNotCovered, name)
	}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    c.cert.NotBefore,
		NotAfter:     c.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: c.leafKey}
	c.leaves[name] = l
	return l, nil
}

// InterceptNames are the host names a policy's bound secrets and HTTP rules name (the
// names its session CA is constrained to).
func (p *Policy) InterceptNames() []string {
	seen := map[string]bool{}
	var out []string
	add := func(d Dest) {
		if d.literal || seen[d.Host] {
			return
		}
		seen[d.Host] = true
		out = append(out, d.Host)
	}
	for _, r := range p.Rules {
		add(r.Dest)
	}
	for _, s := range p.Secrets {
		for _, d := range s.Dests {
			add(d)
		}
	}
	return out
}
