// SPDX-License-Identifier: MIT

//go:build !linux

package netstack

import (
	"fmt"
	"os"
)

// Engine is unavailable off Linux (macOS uses Seatbelt's remote rules, sandbox/darwin).
type Engine struct{}

// Start always fails off Linux.
func Start(Config) (*Engine, error) { return nil, fmt.Errorf("%w: needs Linux", ErrSetup) }

// NetNS is nil off Linux.
func (*Engine) NetNS() *os.File { return nil }

// Close does nothing.
func (*Engine) Close() error { return nil }

// Supported says why no engine can run here.
func Supported() error { return fmt.Errorf("%w: needs Linux", ErrSetup) }
