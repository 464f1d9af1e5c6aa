// SPDX-License-Identifier: MIT

package ui

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/fledgehq/fledge/ui/clip"
)

// Validator names accepted in PromptRequest.Validate (the protocol's built-ins).
const (
	ValidateNone       = ""
	ValidateNonEmpty   = "non_empty"
	ValidateInteger    = "integer"
	ValidatePathExists = "path_exists"
	ValidateURL        = "url"
)

// Validator returns the check for a validator name. An unknown name is an
// ErrInvalidRequest: silently accepting anything would let a typo in a plugin skip the
// check it asked for.
func Validator(name string) (func(string) error, error) {
	switch name {
	case ValidateNone:
		return func(string) error { return nil }, nil
	case ValidateNonEmpty:
		return validateNonEmpty, nil
	case ValidateInteger:
		return validateInteger, nil
	case ValidatePathExists:
		return validatePathExists, nil
	case ValidateURL:
		return validateURL, nil
	}
	return nil, fmt.Errorf("%w: unknown validator %q", ErrInvalidRequest, clip.Mark(plainText(name), 64, "…"))
}

func validateNonEmpty(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("a value is required")
	}
	return nil
}

func validateInteger(s string) error {
	if _, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil {
		return errors.New("not an integer")
	}
	return nil
}

// validatePathExists checks the path as the user typed it, relative to fledge's working
// directory (the project, when fledge runs from it).
func validatePathExists(s string) error {
	if s == "" {
		return errors.New("a path is required")
	}
	if _, err := os.Stat(s); err != nil {
		return errors.New("no such file or directory")
	}
	return nil
}

// validateURL wants an absolute URL: a scheme and a host (or a path for file:).
func validateURL(s string) error {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return errors.New("not a URL (want scheme://host/...)")
	}
	if u.Host == "" && (u.Scheme != "file" || u.Path == "") {
		return errors.New("not a URL (want scheme://host/...)")
	}
	return nil
}
