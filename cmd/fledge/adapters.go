package main

// The runtime-v1 and invoke-v1 adapters register their tools.Provider when imported.
import (
	_ "github.com/fledgehq/fledge/invokehost"
	_ "github.com/fledgehq/fledge/runtimehost"
)
