// Command rpcdrive is a JSON-RPC 2.0 host for make bench: it starts CMD, sends initialize, then
// N tool/execute calls one after another, and prints the median and 90th percentile round
// trip (the first call, which starts the plugin behind fledge serve, is reported apart):
//
//	rpcdrive -n 200 -tool echo -- CMD [ARGS...]
//	first_ns=... median_ns=... p90_ns=... n=200
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"
)

func main() {
	n := flag.Int("n", 200, "tool calls")
	tool := flag.String("tool", "echo", "tool name")
	flag.Parse()
	if flag.NArg() == 0 || *n < 2 {
		fmt.Fprintln(os.Stderr, "usage: rpcdrive [-n N] [-tool NAME] -- CMD [ARGS...]")
		os.Exit(2)
	}
	if err := run(*n, *tool, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "rpcdrive:", err)
		os.Exit(1)
	}
}

func run(n int, tool string, argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	out := bufio.NewScanner(outPipe)
	out.Buffer(make([]byte, 1<<20), 1<<20)
	id := 0
	call := func(method string, params any) (map[string]any, error) {
		id++
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params, "id": id})
		if _, err := in.Write(append(b, '\n')); err != nil {
			return nil, err
		}
		if !out.Scan() {
			return nil, fmt.Errorf("%s: no answer (%v)", method, out.Err())
		}
		var a struct {
			ID     int            `json:"id"`
			Result map[string]any `json:"result"`
			Error  any            `json:"error"`
		}
		if err := json.Unmarshal(out.Bytes(), &a); err != nil || a.ID != id || a.Error != nil {
			return nil, fmt.Errorf("%s: bad answer %s", method, out.Bytes())
		}
		return a.Result, nil
	}
	if _, err := call("initialize", map[string]any{"protocol_version": 1}); err != nil {
		return err
	}
	times := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		r, err := call("tool/execute", map[string]any{"name": tool, "arguments": map[string]any{"text": "ping"}})
		if err != nil {
			return err
		}
		if r["success"] != true || r["result"] != "ping" {
			return fmt.Errorf("tool/execute answered %v", r)
		}
		times = append(times, time.Since(start))
	}
	if _, err := call("shutdown", map[string]any{}); err != nil {
		return err
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		return err
	}
	first := times[0]
	rest := times[1:]
	sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
	fmt.Printf("first_ns=%d median_ns=%d p90_ns=%d n=%d\n", first.Nanoseconds(), rest[len(rest)/2].Nanoseconds(), rest[len(rest)*9/10].Nanoseconds(), n)
	return nil
}
