package main

// The protocol adapters register their tools.Provider with package tools when imported
// (one line per adapter).
import (
	_ "github.com/fledgehq/fledge/invokehost"
	_ "github.com/fledgehq/fledge/mcphost"
	_ "github.com/fledgehq/fledge/runtimehost"
)
