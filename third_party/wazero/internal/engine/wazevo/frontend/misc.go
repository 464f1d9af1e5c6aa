package frontend

import (
	"github.com/fledgehq/fledge/third_party/wazero/internal/engine/wazevo/ssa"
	"github.com/fledgehq/fledge/third_party/wazero/internal/wasm"
)

func FunctionIndexToFuncRef(idx wasm.Index) ssa.FuncRef {
	return ssa.FuncRef(idx)
}
