// SPDX-License-Identifier: MIT

// Command fledge-bench is the plugin `make bench` drives. It is a real fledge-v1 plugin (the
// Go SDK for requests, raw buffered writes where the point is to push bytes fast) with one
// mode per figure, chosen by its first argument:
//
//	exec N            N sequential execs of `true`; reports per-exec round trips
//	oneshot           one exec of `true`, then exits, printing nothing (a whole one-shot run)
//	meta N            N sequential metadata requests (the env key: answered from memory)
//	pipeline N        N execs of `true` sent at once, then the same N one after another
//	gen N             N mixed output/log messages, written as fast as a pipe takes them
//	flood-nonl BYTES  BYTES of output with no newline at all
//	longline BYTES M  one BYTES-long would-be output message, then M valid ones
//	hello             one output line at once (cold start), then waits for init and exits
//
// Reports are one output message holding a JSON object, so they reach fledge's stdout.
// Every mode also runs without fledge (stdout to a pipe, no init) where that makes sense, so
// the same program gives the raw-pipe baseline.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fledgehq/fledge/sdk"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: fledge-bench exec|oneshot|meta|pipeline|gen|flood-nonl|longline|hello (args)"))
	}
	var err error
	switch mode, args := os.Args[1], os.Args[2:]; mode {
	case "hello":
		err = hello()
	case "exec":
		err = withPlugin(func(ctx context.Context, p *sdk.Plugin) error { return execSeq(ctx, p, intArg(args, 0, 100)) })
	case "oneshot":
		err = withPlugin(runTrue)
	case "meta":
		err = withPlugin(func(ctx context.Context, p *sdk.Plugin) error { return metaSeq(ctx, p, intArg(args, 0, 100)) })
	case "pipeline":
		err = withPlugin(func(ctx context.Context, p *sdk.Plugin) error { return pipeline(ctx, p, intArg(args, 0, 64)) })
	case "gen":
		err = gen(intArg(args, 0, 1_000_000))
	case "flood-nonl":
		err = floodNoNewline(int64(intArg(args, 0, 1<<30)))
	case "longline":
		err = longLine(intArg(args, 0, 50<<20), intArg(args, 1, 1000))
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fledge-bench:", err)
	os.Exit(1)
}

func intArg(args []string, i, def int) int {
	if i >= len(args) {
		return def
	}
	n, err := strconv.Atoi(args[i])
	if err != nil || n < 0 {
		fail(fmt.Errorf("argument %d: want a non-negative integer, got %q", i+1, args[i]))
	}
	return n
}

func withPlugin(fn func(ctx context.Context, p *sdk.Plugin) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, err := sdk.Connect(ctx, os.Stdin, os.Stdout, sdk.WithWarnings(os.Stderr))
	if err != nil {
		return err
	}
	return fn(ctx, p)
}

func report(p *sdk.Plugin, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return p.Output(string(b) + "\n")
}

// runTrue is one exec of `true` that must succeed.
func runTrue(ctx context.Context, p *sdk.Plugin) error {
	res, err := p.Exec(ctx, "true")
	if err != nil {
		return err
	}
	if res.Code != 0 {
		return fmt.Errorf("exec true: code %d reason %q stderr %q", res.Code, res.Reason, res.Stderr)
	}
	return nil
}

// ExecReport is what exec mode reports; times are nanoseconds.
type ExecReport struct {
	N      int   `json:"n"`
	Total  int64 `json:"total_ns"`
	Mean   int64 `json:"mean_ns"`
	Median int64 `json:"median_ns"`
	Min    int64 `json:"min_ns"`
}

func execSeq(ctx context.Context, p *sdk.Plugin, n int) error {
	return timedSeq(ctx, p, n, runTrue)
}

// metaSeq times N metadata requests the host answers from memory: the floor of a round trip.
func metaSeq(ctx context.Context, p *sdk.Plugin, n int) error {
	return timedSeq(ctx, p, n, func(ctx context.Context, p *sdk.Plugin) error {
		m, err := p.Metadata(ctx, "env")
		if err != nil {
			return err
		}
		if _, ok := m["env"]; !ok {
			return errors.New("metadata: no env in the answer")
		}
		return nil
	})
}

// timedSeq runs one(ctx, p) once to warm up, then N times, and reports the round trips.
func timedSeq(ctx context.Context, p *sdk.Plugin, n int, one func(context.Context, *sdk.Plugin) error) error {
	if n <= 0 {
		return errors.New("the count must be positive")
	}
	// One warm-up: the first one pays for page faults in the host's path.
	if err := one(ctx, p); err != nil {
		return err
	}
	times := make([]int64, 0, n)
	start := time.Now()
	for range n {
		t := time.Now()
		if err := one(ctx, p); err != nil {
			return err
		}
		times = append(times, int64(time.Since(t)))
	}
	total := int64(time.Since(start))
	slices.Sort(times)
	return report(p, ExecReport{N: n, Total: total, Mean: total / int64(n), Median: times[n/2], Min: times[0]})
}

// PipelineReport is what pipeline mode reports; times are nanoseconds.
type PipelineReport struct {
	N          int   `json:"n"`
	Pipelined  int64 `json:"pipelined_ns"`
	Sequential int64 `json:"sequential_ns"`
}

func pipeline(ctx context.Context, p *sdk.Plugin, n int) error {
	if err := runTrue(ctx, p); err != nil { // warm-up, as in exec mode
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if err := runTrue(ctx, p); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	piped := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	start = time.Now()
	for range n {
		if err := runTrue(ctx, p); err != nil {
			return err
		}
	}
	return report(p, PipelineReport{N: n, Pipelined: int64(piped), Sequential: int64(time.Since(start))})
}

// gen writes n messages: three outputs to one log, the mix of a chatty build tool. The lines
// are prebuilt so the generator costs a memcpy per message, not a JSON encode.
func gen(n int) error {
	levels := []string{"debug", "info", "warn", "error"}
	var lines [][]byte
	for i := range 16 {
		var m any
		if i%4 == 3 {
			m = map[string]string{"type": "log", "level": levels[i/4], "message": fmt.Sprintf("step %d of the build finished", i)}
		} else {
			m = map[string]string{"type": "output", "text": fmt.Sprintf("compiled module %02d: ok\n", i)}
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		lines = append(lines, append(b, '\n'))
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	for i := range n {
		if _, err := w.Write(lines[i%len(lines)]); err != nil {
			return err
		}
	}
	return w.Flush()
}

// repeatWriter writes total bytes of b's content in len(b)-sized writes.
func repeatWriter(w io.Writer, b []byte, total int64) error {
	for total > 0 {
		chunk := b
		if int64(len(chunk)) > total {
			chunk = chunk[:total]
		}
		n, err := w.Write(chunk)
		if err != nil {
			return err
		}
		total -= int64(n)
	}
	return nil
}

func floodNoNewline(total int64) error {
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 'x'
	}
	return repeatWriter(os.Stdout, buf, total)
}

// longLine writes an output message whose text makes it size bytes long (far past fledge's
// line bound), then m valid output messages that must all still get through.
func longLine(size, m int) error {
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	head := `{"type":"output","text":"`
	tail := "\"}\n"
	if size < len(head)+len(tail) {
		size = len(head) + len(tail)
	}
	if _, err := w.WriteString(head); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 'y'
	}
	if err := repeatWriter(w, buf, int64(size-len(head)-len(tail))); err != nil {
		return err
	}
	if _, err := w.WriteString(tail); err != nil {
		return err
	}
	for i := range m {
		if _, err := fmt.Fprintf(w, "{\"type\":\"output\",\"text\":\"after the long line %d\\n\"}\n", i); err != nil {
			return err
		}
	}
	return w.Flush()
}

// hello is the cold-start probe: the first message goes out before anything else happens,
// so the host measures spawn-to-first-message. Then it waits for init (or EOF) and exits.
func hello() error {
	if _, err := os.Stdout.WriteString("{\"type\":\"output\",\"text\":\"hello\\n\"}\n"); err != nil {
		return err
	}
	r := bufio.NewReaderSize(os.Stdin, 4096)
	for {
		_, err := r.ReadSlice('\n')
		if err == nil || errors.Is(err, io.EOF) {
			return nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}
