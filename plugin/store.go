// SPDX-License-Identifier: MIT

package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
	"unicode/utf8"
)

// StateFile is a plugin's key/value store inside its plugin dir.
const StateFile = "state.json"

// ErrLimit is matched by every *LimitError.
var ErrLimit = errors.New("store limit exceeded")

// LimitError is a store refused because it crossed a bound. Nothing was changed.
type LimitError struct {
	What  string // "key", "value", "keys", "file"
	Limit int
	Got   int
}

func (e *LimitError) Error() string {
	switch e.What {
	case "key":
		if e.Got < 0 {
			return "store limit exceeded: key is empty or contains control characters or invalid UTF-8"
		}
		return fmt.Sprintf("store limit exceeded: key is %d bytes, at most %d allowed", e.Got, e.Limit)
	case "value":
		return fmt.Sprintf("store limit exceeded: value is %d bytes, at most %d allowed", e.Got, e.Limit)
	case "keys":
		return fmt.Sprintf("store limit exceeded: %d keys, at most %d allowed", e.Got, e.Limit)
	}
	return fmt.Sprintf("store limit exceeded: state.json would be %d bytes, at most %d allowed", e.Got, e.Limit)
}

func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// StoreLimits bound one plugin's store. Zero fields take DefaultStoreLimits' value.
type StoreLimits struct {
	MaxKeyBytes   int
	MaxValueBytes int
	MaxKeys       int
	MaxFileBytes  int
}

// DefaultStoreLimits bound one plugin's store: a key, a value, the number of keys and the
// file, so a plugin cannot fill the disk through it.
var DefaultStoreLimits = StoreLimits{MaxKeyBytes: 256, MaxValueBytes: 64 << 10, MaxKeys: 256, MaxFileBytes: 1 << 20}

func (l StoreLimits) withDefaults() StoreLimits {
	d := DefaultStoreLimits
	if l.MaxKeyBytes > 0 {
		d.MaxKeyBytes = l.MaxKeyBytes
	}
	if l.MaxValueBytes > 0 {
		d.MaxValueBytes = l.MaxValueBytes
	}
	if l.MaxKeys > 0 {
		d.MaxKeys = l.MaxKeys
	}
	if l.MaxFileBytes > 0 {
		d.MaxFileBytes = l.MaxFileBytes
	}
	return d
}

// Store is one plugin's state.json: string keys to string values, held in memory and written
// atomically on every Set. Safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	path     string
	lim      StoreLimits
	data     map[string]string
	warnings []string
	now      func() time.Time
}

// OpenStore loads path (missing = empty store). A symlink or non-regular file there is
// refused with ErrUnsafeFile. A file that is not a JSON object of strings, or is over the
// file limit, is moved aside to state.json.corrupt-<timestamp> and reported in Warnings;
// the store then starts empty. It is never silently emptied.
func OpenStore(path string, lim StoreLimits) (*Store, error) {
	s := &Store{path: path, lim: lim.withDefaults(), data: map[string]string{}, now: time.Now}
	data, err := readRegular(path, int64(s.lim.MaxFileBytes))
	switch {
	case err == nil:
		if jerr := json.Unmarshal(data, &s.data); jerr != nil || s.data == nil {
			s.data = map[string]string{}
			if err := s.moveAside(fmt.Sprintf("not a JSON object of strings (%v)", jerr)); err != nil {
				return nil, err
			}
		}
	case errors.Is(err, os.ErrNotExist):
	case errors.Is(err, ErrTooLarge):
		if err := s.moveAside(fmt.Sprintf("larger than %d bytes", s.lim.MaxFileBytes)); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("open store: %w", err)
	}
	return s, nil
}

func (s *Store) moveAside(why string) error {
	aside := fmt.Sprintf("%s.corrupt-%s", s.path, s.now().UTC().Format("20060102T150405.000000000Z"))
	// The file is a regular file (readRegular checked); a race that swaps in a symlink only
	// moves the link itself, since rename never follows.
	if err := os.Rename(s.path, aside); err != nil {
		return fmt.Errorf("move corrupt %s aside: %w", s.path, err)
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return err
	}
	s.warnings = append(s.warnings, fmt.Sprintf("%s was corrupt (%s); moved it to %s and started empty", s.path, why, aside))
	return nil
}

// Warnings reports what OpenStore had to repair.
func (s *Store) Warnings() []string { return append([]string(nil), s.warnings...) }

// Get returns the value stored under key.
func (s *Store) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return v, ok
}

// Len is the number of keys.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.data)
}

// Keys returns the keys, sorted.
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.data))
	for k := range s.data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func validKey(k string) bool {
	if k == "" || !utf8.ValidString(k) {
		return false
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// Set stores value under key and writes state.json atomically. A bound crossed gives a
// *LimitError and changes nothing, in memory or on disk; a failed write also leaves the
// previous state in place.
func (s *Store) Set(key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lim
	if len(key) > l.MaxKeyBytes {
		return &LimitError{What: "key", Limit: l.MaxKeyBytes, Got: len(key)}
	}
	if !validKey(key) {
		return &LimitError{What: "key", Limit: l.MaxKeyBytes, Got: -1}
	}
	if len(value) > l.MaxValueBytes {
		return &LimitError{What: "value", Limit: l.MaxValueBytes, Got: len(value)}
	}
	old, existed := s.data[key]
	if !existed && len(s.data)+1 > l.MaxKeys {
		return &LimitError{What: "keys", Limit: l.MaxKeys, Got: len(s.data) + 1}
	}
	s.data[key] = value
	undo := func() {
		if existed {
			s.data[key] = old
		} else {
			delete(s.data, key)
		}
	}
	buf, err := json.MarshalIndent(s.data, "", "  ")
	if err != nil {
		undo()
		return err
	}
	buf = append(buf, '\n')
	if len(buf) > l.MaxFileBytes {
		undo()
		return &LimitError{What: "file", Limit: l.MaxFileBytes, Got: len(buf)}
	}
	if err := writeFileAtomic(s.path, buf, 0o600); err != nil {
		undo()
		return fmt.Errorf("write %s: %w", s.path, err)
	}
	return nil
}
