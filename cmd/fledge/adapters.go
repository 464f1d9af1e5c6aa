package main

// The protocol adapters register their tools providers with package tools in init; each
// is imported here for that side effect (one line per adapter).
import (
	_ "github.com/fledgehq/fledge/mcphost"
)
