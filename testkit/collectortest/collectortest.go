// SPDX-License-Identifier: MIT

// Package collectortest runs the OpenTelemetry Collector's own OTLP receiver
// (testkit/otelcollector, a module of its own, built from the module proxy) for
// tests of fledge's audit export: a real collector on loopback, writing what it accepted to
// a file.
package collectortest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	collectorOnce sync.Once
	collectorBin  string
	collectorErr  error
)

// Binary builds testkit/otelcollector once per test binary, or returns
// FLEDGE_TEST_OTELCOL when that names one already built (.ci/run builds it first).
func Binary(t testing.TB) string {
	t.Helper()
	collectorOnce.Do(func() {
		if p := os.Getenv("FLEDGE_TEST_OTELCOL"); p != "" {
			collectorBin = p
			if _, err := os.Stat(p); err != nil {
				collectorErr = fmt.Errorf("FLEDGE_TEST_OTELCOL: %w", err)
			}
			return
		}
		dir, err := os.MkdirTemp("", "fledge-otelcol-")
		if err != nil {
			collectorErr = err
			return
		}
		collectorBin = filepath.Join(dir, "otelcollector")
		_, file, _, _ := runtime.Caller(0)
		src := filepath.Join(filepath.Dir(file), "..", "otelcollector")
		cmd := exec.Command("go", "build", "-o", collectorBin, ".")
		cmd.Dir = src
		// Its own module: the main module's -mod or workspace settings do not apply.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			collectorErr = fmt.Errorf("building the collector: %v\n%s", err, out)
		}
	})
	if collectorErr != nil {
		t.Fatal(collectorErr)
	}
	return collectorBin
}

// collector is one running collector process.
type Collector struct {
	t    testing.TB
	bin  string
	addr string
	out  string
	cmd  *exec.Cmd
	// Header is a request header the collector records with each log record (Got.Header);
	// set it before Restart, or use StartWithHeader.
	Header string
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start runs a collector on a free loopback port, writing to a file in t's temp dir.
func Start(t testing.TB) *Collector { return StartWithHeader(t, "") }

// StartWithHeader is Start, recording the request header named header with each record.
func StartWithHeader(t testing.TB, header string) *Collector {
	t.Helper()
	c := &Collector{t: t, bin: Binary(t), addr: freeAddr(t), out: filepath.Join(t.TempDir(), "received.jsonl"), Header: header}
	c.start()
	t.Cleanup(c.Kill)
	return c
}

// URL is where OTLP/HTTP logs go.
func (c *Collector) URL() string { return "http://" + c.addr + "/v1/logs" }

// Restart starts it again on the same address and file.
func (c *Collector) Restart() { c.start() }

func (c *Collector) start() {
	c.t.Helper()
	args := []string{"-listen", c.addr, "-out", c.out}
	if c.Header != "" {
		args = append(args, "-header", c.Header)
	}
	cmd := exec.Command(c.bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				// Keep draining so the collector never blocks on stdout.
				for sc.Scan() {
				}
				return
			}
		}
		ready <- fmt.Errorf("collector exited before it was ready")
	}()
	select {
	case err := <-ready:
		if err != nil {
			c.t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		c.t.Fatal("collector not ready within 30s")
	}
	c.cmd = cmd
}

// Kill ends the collector with SIGKILL: no goodbye, as a crash or an OOM kill.
func (c *Collector) Kill() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
	c.cmd = nil
}

// Got is one log record the collector accepted.
type Got struct {
	Body       string         `json:"body"`
	Attributes map[string]any `json:"attributes"`
	Resource   map[string]any `json:"resource"`
	Scope      string         `json:"scope"`
	TimeNanos  int64          `json:"time_unix_nano"`
	Severity   string         `json:"severity"`
	Header     string         `json:"header"`
}

// Seq is the record's fledge.seq attribute.
func (g Got) Seq() uint64 {
	switch v := g.Attributes["fledge.seq"].(type) {
	case float64:
		return uint64(v)
	case json.Number:
		n, _ := v.Int64()
		return uint64(n)
	}
	return 0
}

// Received reads what the collector accepted so far.
func (c *Collector) Received() []Got {
	c.t.Helper()
	b, err := os.ReadFile(c.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		c.t.Fatal(err)
	}
	var out []Got
	for _, ln := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if ln == "" {
			continue
		}
		var g Got
		if err := json.Unmarshal([]byte(ln), &g); err != nil {
			c.t.Fatalf("collector output line %q: %v", ln, err)
		}
		out = append(out, g)
	}
	return out
}
