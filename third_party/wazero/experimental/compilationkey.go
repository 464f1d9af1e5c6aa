package experimental

import (
	"context"

	"github.com/fledgehq/fledge/third_party/wazero/internal/expctxkeys"
)

// WithCompilationKey returns a context with which Runtime.CompileModule identifies the
// binary by key instead of by a sha256 of its bytes, for an embedder that already has a
// digest of what it compiles (hashing a large binary again costs milliseconds). (fledge
// patch)
//
// The key is what finds compiled code, in memory and in a compilation cache, and a hit's
// function bodies are not validated again: the same key must never be given for different
// bytes. Use a cryptographic hash of the binary, or of bytes the binary is a deterministic
// function of together with a version of that function.
func WithCompilationKey(ctx context.Context, key [32]byte) context.Context {
	return context.WithValue(ctx, expctxkeys.CompilationKeyKey{}, key)
}

// WithBinaryRetained returns a context with which Runtime.CompileModule keeps references
// into the binary it decodes (function bodies, data segments) instead of copying them out,
// for an embedder whose binary is never modified while the CompiledModule is in use: it
// saves a copy of most of the module, which on a compilation-cache hit was most of the
// decode. (fledge patch)
func WithBinaryRetained(ctx context.Context) context.Context {
	return context.WithValue(ctx, expctxkeys.RetainBinaryKey{}, true)
}
