//go:build wasip1

// benchguest is the WASM plugin `make bench` drives, written with the SDK like a real one.
// It prints "ready" on its stdout first thing (the cold-start probe: fledge turns it into an
// output message), then, per init's arguments:
//
//	hello    nothing more
//	exec N   N sequential execs of `true`; reports the per-exec round trips
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/fledgehq/fledge/sdk"
)

func main() {
	fmt.Println("ready")
	p, err := sdk.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchguest:", err)
		os.Exit(1)
	}
	args := p.Args()
	if len(args) < 2 || args[0] != "exec" {
		return
	}
	n, _ := strconv.Atoi(args[1])
	ctx := context.Background()
	times := make([]int64, 0, n)
	var total int64
	for range n {
		t := time.Now()
		res, err := p.Exec(ctx, "true")
		if err != nil || res.Code != 0 {
			fmt.Fprintln(os.Stderr, "benchguest: exec:", err, res)
			os.Exit(1)
		}
		d := int64(time.Since(t))
		times = append(times, d)
		total += d
	}
	slices.Sort(times)
	b, _ := json.Marshal(map[string]int64{"n": int64(n), "mean_ns": total / int64(max(n, 1)), "median_ns": times[len(times)/2]})
	_ = p.Output(string(b) + "\n")
}
