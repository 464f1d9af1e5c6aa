//go:build wasip1

// hostfn exercises the capability-gated host functions; init's first argument says how.
package main

import (
	"encoding/json"
	"fmt"

	"github.com/fledgehq/fledge/sandbox/wasm/testdata/guests/abi"
	"github.com/fledgehq/fledge/sandbox/wasm/testdata/guests/hostabi"
)

func report(v any) {
	b, _ := json.Marshal(v)
	abi.Output(string(b) + "\n")
}

func main() {
	in := abi.ReadInit()
	mode := in.Args[0]
	switch mode {
	case "exec":
		// args: exec <command> [cwd] [bufsize]
		req := map[string]any{"command": in.Args[1]}
		if len(in.Args) > 2 && in.Args[2] != "" {
			req["cwd"] = in.Args[2]
		}
		buf := 65536
		if len(in.Args) > 3 {
			fmt.Sscan(in.Args[3], &buf)
		}
		b, _ := json.Marshal(req)
		n := hostabi.Exec(b)
		msg, calls := abi.Recv(buf)
		var res map[string]any
		err := json.Unmarshal(msg, &res)
		report(map[string]any{"returned": n, "received": len(msg), "calls": calls, "parse_error": fmt.Sprint(err), "reply": res})
	case "store":
		hostabi.StoreSet([]byte(`{"key":"color","value":"teal"}`))
		n := hostabi.StoreGet([]byte("color"))
		v, _ := abi.Recv(4096)
		m := hostabi.StoreGet([]byte("missing"))
		miss, _ := abi.Recv(4096)
		report(map[string]any{"returned": n, "value": string(v), "missing_returned": m, "missing": string(miss)})
	case "metadata":
		n := hostabi.Metadata([]byte(`["fledge_config","env"]`))
		v, _ := abi.Recv(4096)
		var res map[string]any
		err := json.Unmarshal(v, &res)
		report(map[string]any{"returned": n, "parse_error": fmt.Sprint(err), "reply": res})
	}
	abi.Exit(0)
}
