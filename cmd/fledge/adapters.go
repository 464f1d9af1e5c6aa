package main

// The protocol adapters register their tools.Provider with package tools when imported
// (one line per adapter).
import (
	_ "github.com/fledgehq/fledge/protocolhost/invokev1"
	_ "github.com/fledgehq/fledge/protocolhost/mcp"
	_ "github.com/fledgehq/fledge/protocolhost/runtimev1"
)
