package expctxkeys

// CompilationKeyKey is a context.Context Value key. Its associated value should be a
// [32]byte that identifies the binary being compiled. (fledge patch)
type CompilationKeyKey struct{}

// RetainBinaryKey is a context.Context Value key: set, Runtime.CompileModule keeps
// references into the binary instead of copying function bodies and data segments out of
// it. (fledge patch)
type RetainBinaryKey struct{}
