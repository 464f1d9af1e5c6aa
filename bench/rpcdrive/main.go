// SPDX-License-Identifier: MIT

// Command rpcdrive is a JSON-RPC 2.0 host for make bench: it starts CMD, sends initialize, then
// N tool/execute calls one after another, and prints the median and 90th percentile round
// trip (the first call, which starts the plugin behind fledge serve, is reported apart):
//
//	rpcdrive -n 200 -tool echo -- CMD [ARGS...]
//	first_ns=... median_ns=... p90_ns=... n=200
//
// With -fsync-floor DIR it measures instead the disk I/O of one durable tool call's audit
// records on the disk DIR is on, and nothing else (fsyncFloor): the floor under a tool call
// whose decision must be on disk before the call goes out.
//
//	rpcdrive -n 200 -fsync-floor DIR
//	median_ns=... p90_ns=... n=200
//
// With -in-place as well, the same lines are written in place into a preallocated file and
// synced with fdatasync (no size or block allocation to commit): the floor of a log kept that
// way.
//
// With -c N it runs N callers at once, each making its calls one after another, spread
// over -conns K hosts' connections (K commands started, default 1: the N callers' requests
// are pipelined on one connection and answers matched by id; K = N: N hosts, one caller
// each), and prints the calls per second over all of them and the median round trip:
//
//	rpcdrive -n 800 -c 8 [-conns 1] -tool echo -- CMD [ARGS...]
//	concurrent calls=800 c=8 conns=1 wall_ns=... calls_per_s=... median_ns=... p90_ns=...
//
// With -relay it is a bare line relay between its stdin/stdout and CMD (one goroutine, no
// parsing): driving the plugin through it measures what two more pipe hops and a Go process
// in the middle cost, the floor under any host that stands between (as fledge serve does).
//
//	rpcdrive -n 200 -tool echo -- rpcdrive -relay -- CMD [ARGS...]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"sync"
	"time"
)

func main() {
	n := flag.Int("n", 200, "tool calls")
	tool := flag.String("tool", "echo", "tool name")
	floor := flag.String("fsync-floor", "", "measure append+fsync on the disk of this directory instead")
	inPlace := flag.Bool("in-place", false, "with -fsync-floor: write a preallocated file in place and fdatasync it instead")
	relayMode := flag.Bool("relay", false, "relay lines between stdin/stdout and CMD")
	callers := flag.Int("c", 1, "callers at once (pipelined on the connections)")
	conns := flag.Int("conns", 1, "commands started for -c (the callers are spread over them)")
	flag.Parse()
	if *relayMode {
		if err := relay(flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "rpcdrive:", err)
			os.Exit(1)
		}
		return
	}
	if *floor != "" {
		if err := fsyncFloor(*n, *floor, *inPlace); err != nil {
			fmt.Fprintln(os.Stderr, "rpcdrive:", err)
			os.Exit(1)
		}
		return
	}
	if flag.NArg() == 0 || *n < 2 {
		fmt.Fprintln(os.Stderr, "usage: rpcdrive [-n N] [-tool NAME] -- CMD [ARGS...]")
		os.Exit(2)
	}
	if *callers > 1 {
		if err := concurrent(*n, *callers, *conns, *tool, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "rpcdrive:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*n, *tool, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "rpcdrive:", err)
		os.Exit(1)
	}
}

func run(n int, tool string, argv []string) error {
	cmd, in, outPipe, err := startPiped(argv)
	if err != nil {
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

// mux is one host connection shared by several callers: requests written whole under a
// lock, answers matched to their caller by id.
type mux struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	mu      sync.Mutex
	id      int
	waiting map[int]chan []byte
}

func startMux(argv []string) (*mux, error) {
	cmd, in, outPipe, err := startPiped(argv)
	if err != nil {
		return nil, err
	}
	m := &mux{cmd: cmd, in: in, waiting: map[int]chan []byte{}}
	go func() {
		out := bufio.NewScanner(outPipe)
		out.Buffer(make([]byte, 1<<20), 1<<20)
		for out.Scan() {
			var a struct {
				ID int `json:"id"`
			}
			if json.Unmarshal(out.Bytes(), &a) != nil {
				continue
			}
			m.mu.Lock()
			ch := m.waiting[a.ID]
			delete(m.waiting, a.ID)
			m.mu.Unlock()
			if ch != nil {
				ch <- append([]byte(nil), out.Bytes()...)
			}
		}
		m.mu.Lock()
		for id, ch := range m.waiting {
			close(ch)
			delete(m.waiting, id)
		}
		m.mu.Unlock()
	}()
	return m, nil
}

func (m *mux) call(method string, params any) (map[string]any, error) {
	ch := make(chan []byte, 1)
	m.mu.Lock()
	m.id++
	id := m.id
	m.waiting[id] = ch
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params, "id": id})
	_, err := m.in.Write(append(b, '\n'))
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	line, ok := <-ch
	if !ok {
		return nil, fmt.Errorf("%s: no answer", method)
	}
	var a struct {
		Result map[string]any `json:"result"`
		Error  any            `json:"error"`
	}
	if err := json.Unmarshal(line, &a); err != nil || a.Error != nil {
		return nil, fmt.Errorf("%s: bad answer %s", method, line)
	}
	return a.Result, nil
}

// concurrent runs c callers at once over conns connections, n calls in all (after one
// call per connection that starts its plugin, not counted).
func concurrent(n, c, conns int, tool string, argv []string) error {
	if conns < 1 || conns > c {
		return fmt.Errorf("-conns must be 1..%d", c)
	}
	ms := make([]*mux, conns)
	for i := range ms {
		m, err := startMux(argv)
		if err != nil {
			return err
		}
		ms[i] = m
		if _, err := m.call("initialize", map[string]any{"protocol_version": 1}); err != nil {
			return err
		}
		if _, err := m.call("tool/execute", map[string]any{"name": tool, "arguments": map[string]any{"text": "ping"}}); err != nil {
			return err
		}
	}
	var (
		mu    sync.Mutex
		times = make([]time.Duration, 0, n)
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for k := 0; k < c; k++ {
		calls := n / c
		if k < n%c {
			calls++
		}
		wg.Add(1)
		go func(m *mux, calls int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				t0 := time.Now()
				r, err := m.call("tool/execute", map[string]any{"name": tool, "arguments": map[string]any{"text": "ping"}})
				if err == nil && (r["success"] != true || r["result"] != "ping") {
					err = fmt.Errorf("tool/execute answered %v", r)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				times = append(times, time.Since(t0))
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}(ms[k%conns], calls)
	}
	wg.Wait()
	wall := time.Since(start)
	for _, m := range ms {
		_, _ = m.call("shutdown", map[string]any{})
		m.in.Close()
		if err := m.cmd.Wait(); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("concurrent calls=%d c=%d conns=%d wall_ns=%d calls_per_s=%.0f median_ns=%d p90_ns=%d\n",
		n, c, conns, wall.Nanoseconds(), float64(n)/wall.Seconds(), times[len(times)/2].Nanoseconds(), times[len(times)*9/10].Nanoseconds())
	return nil
}

// fsyncFloor makes, n times, the disk I/O one durable tool call makes in the audit log, and
// nothing else: a decision-sized line appended and fsynced, a head slot written in place in
// a second file, an outcome-sized line appended (no lock, no encoding, no chain). It prints
// the median and 90th percentile of the whole.
func fsyncFloor(n int, dir string, inPlace bool) error {
	f, err := os.CreateTemp(dir, "fsync-floor-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	head, err := os.CreateTemp(dir, "fsync-floor-head-*")
	if err != nil {
		return err
	}
	defer os.Remove(head.Name())
	defer head.Close()
	line := func(size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = 'x'
		}
		b[size-1] = '\n'
		return b
	}
	decision, outcome, slot := line(650), line(450), line(512)
	times := make([]time.Duration, 0, n)
	if inPlace {
		return inPlaceFloor(n, f, head, decision, outcome, slot)
	}
	for i := range n {
		start := time.Now()
		if _, err := f.Write(decision); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if _, err := head.WriteAt(slot, int64(i%2)*512); err != nil {
			return err
		}
		if _, err := f.Write(outcome); err != nil {
			return err
		}
		times = append(times, time.Since(start))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("median_ns=%d p90_ns=%d n=%d\n", times[len(times)/2].Nanoseconds(), times[len(times)*9/10].Nanoseconds(), n)
	return nil
}

// relay passes each line from stdin to CMD and each answer line back, in turn (requests
// are answered one by one, as rpcdrive sends them).
func relay(argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("-relay needs a command")
	}
	cmd, in, outPipe, err := startPiped(argv)
	if err != nil {
		return err
	}
	host := bufio.NewReaderSize(os.Stdin, 1<<20)
	plug := bufio.NewReaderSize(outPipe, 1<<20)
	for {
		line, err := host.ReadSlice('\n')
		if err != nil {
			break
		}
		if _, err := in.Write(line); err != nil {
			return err
		}
		answer, err := plug.ReadSlice('\n')
		if err != nil {
			break
		}
		if _, err := os.Stdout.Write(answer); err != nil {
			return err
		}
	}
	in.Close()
	return cmd.Wait()
}

// startPiped starts argv with pipes to its stdin and from its stdout (its stderr is ours).
func startPiped(argv []string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return cmd, in, out, nil
}
