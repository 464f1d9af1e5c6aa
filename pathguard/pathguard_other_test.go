// SPDX-License-Identifier: MIT

//go:build unix && !linux

package pathguard

import "testing"

// Only os.Root exists here.
var testModes = []string{"osroot"}

func setMode(testing.TB, *Guard, string) {}

func checkMode(testing.TB, *Guard, string) {}

func availableModes() []string { return testModes }
