// SPDX-License-Identifier: MIT

//go:build !unix

package policy

// ManagedDir is empty: this OS has no place for a managed policy (nor the owner checks that
// make one trusted: LoadManaged on unix).
func ManagedDir() string { return "" }

// LoadManaged finds no managed policy here (nil): ManagedDir names none.
func LoadManaged() (*Managed, error) { return nil, nil }
