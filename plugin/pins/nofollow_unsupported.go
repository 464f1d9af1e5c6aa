// SPDX-License-Identifier: MIT

//go:build !unix

package pins

// oNoFollow is nothing here: this OS's open has no such flag (fledge runs no plugin on it).
const oNoFollow = 0
