// SPDX-License-Identifier: MIT

//go:build !unix

package stub

import "errors"

// errUnsupported: the stub confines itself with unix primitives only.
var errUnsupported = errors.New("the sandbox stub runs only on unix")

func markCloexec(int) error { return errUnsupported }

func apply(*Policy) error { return &StepError{Step: "apply", Msg: errUnsupported.Error()} }
