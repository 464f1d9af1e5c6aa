package expctxkeys

// CompilationKeyKey is a context.Context Value key. Its associated value should be a
// [32]byte that identifies the binary being compiled. (fledge patch)
type CompilationKeyKey struct{}
