// SPDX-License-Identifier: MIT

//go:build unix && !linux

package stub

import (
	"errors"
	"os"
	"time"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// ErrNetHandOff wraps every failure to take over a run's egress namespace from its stub.
var ErrNetHandOff = errors.New("network hand-off from the stub failed")

func netPair() (host, child *os.File, err error) {
	return nil, nil, errors.Join(ErrNetHandOff, errors.New("only on Linux"))
}

func receiveNet(*os.File, *kernel.EgressNet, func(*kernel.EgressFDs) error, time.Time) (bool, error) {
	return false, errors.Join(ErrNetHandOff, errors.New("only on Linux"))
}
