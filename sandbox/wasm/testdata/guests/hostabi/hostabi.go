//go:build wasip1

// Package hostabi declares the capability-gated fledge host functions (exec, store_set,
// store_get, metadata). A module that uses it imports them all.
package hostabi

import "unsafe"

//go:wasmimport fledge exec
func exec(ptr unsafe.Pointer, n uint32) uint32

//go:wasmimport fledge store_set
func storeSet(ptr unsafe.Pointer, n uint32)

//go:wasmimport fledge store_get
func storeGet(ptr unsafe.Pointer, n uint32) uint32

//go:wasmimport fledge metadata
func metadata(ptr unsafe.Pointer, n uint32) uint32

func p(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// Exec asks for a command; the result is the reply's length (read it with recv).
func Exec(req []byte) int { return int(exec(p(req), uint32(len(req)))) }

// StoreSet stores {key, value}.
func StoreSet(req []byte) { storeSet(p(req), uint32(len(req))) }

// StoreGet asks for a key's value; the result is the reply's length.
func StoreGet(key []byte) int { return int(storeGet(p(key), uint32(len(key)))) }

// Metadata asks for keys (a JSON array); the result is the reply's length.
func Metadata(keys []byte) int { return int(metadata(p(keys), uint32(len(keys)))) }
