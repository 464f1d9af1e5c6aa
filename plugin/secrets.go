// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/fledgehq/fledge/policy"
)

// Secrets are kept one file per name, 0600, in <state dir>/secrets (0700): beside the audit
// log, which no plugin or command can reach (the sandbox's Deny list).

// MaxSecretBytes bounds one secret's value.
const MaxSecretBytes = 64 << 10

var (
	// ErrSecretName: not a name a secret can have.
	ErrSecretName = errors.New("invalid secret name")
	// ErrSecretTooLarge: a value over MaxSecretBytes.
	ErrSecretTooLarge = errors.New("secret too large")
)

func secretsDir(stateDir string) string { return filepath.Join(stateDir, "secrets") }

// SetSecret stores value under name (replacing any), readable by the user only.
func SetSecret(stateDir, name string, value []byte) error {
	if !policy.ValidSecretName(name) {
		return fmt.Errorf("%w: %q", ErrSecretName, name)
	}
	if len(value) > MaxSecretBytes {
		return fmt.Errorf("%w: more than %d bytes", ErrSecretTooLarge, MaxSecretBytes)
	}
	dir := secretsDir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(value); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// LookupSecret returns the stored value of name; ok is false when none is stored.
func LookupSecret(stateDir, name string) (value string, ok bool, err error) {
	if !policy.ValidSecretName(name) {
		return "", false, fmt.Errorf("%w: %q", ErrSecretName, name)
	}
	p := filepath.Join(secretsDir(stateDir), name)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > MaxSecretBytes {
		return "", false, fmt.Errorf("secret %s: not a regular file of at most %d bytes", name, MaxSecretBytes)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", false, err
	}
	return string(b), true, nil
}

// RemoveSecret deletes a stored secret (no error when there is none).
func RemoveSecret(stateDir, name string) error {
	if !policy.ValidSecretName(name) {
		return fmt.Errorf("%w: %q", ErrSecretName, name)
	}
	err := os.Remove(filepath.Join(secretsDir(stateDir), name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// SecretNames lists the stored secrets' names (never their values).
func SecretNames(stateDir string) ([]string, error) {
	es, err := os.ReadDir(secretsDir(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		if policy.ValidSecretName(e.Name()) && e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
