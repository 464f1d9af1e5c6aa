// SPDX-License-Identifier: MIT

// Command mcphttp is make bench's MCP over Streamable HTTP pair: a server and a client.
//
//	mcphttp -serve 127.0.0.1:0           an MCP server (official Go SDK) with one tool, echo,
//	                                     at http://ADDR/mcp; prints "url=URL", serves until killed
//	mcphttp -n N -url URL [-token-file F] calls echo N times one after another over one session
//	                                     and prints median_ns, p90_ns and first_ns (the first
//	                                     call, left out of the others)
//
// The client runs against the server directly and against `fledge serve --mcp --listen`
// with the server installed as a remote plugin: the difference is what fledge adds to a
// tool call (bearer check, its catalogue, pins, the call's durable audit decision and
// outcome, a second HTTP hop).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	serve := flag.String("serve", "", "serve an echo MCP server at this address")
	n := flag.Int("n", 200, "calls to make")
	url := flag.String("url", "", "the MCP endpoint to call")
	tool := flag.String("tool", "echo", "the tool to call")
	tokenFile := flag.String("token-file", "", "send this file's token as the bearer token")
	flag.Parse()
	if *serve != "" {
		if err := runServer(*serve); err != nil {
			fmt.Fprintln(os.Stderr, "mcphttp:", err)
			os.Exit(1)
		}
		return
	}
	if err := runClient(*url, *tool, *tokenFile, *n); err != nil {
		fmt.Fprintln(os.Stderr, "mcphttp:", err)
		os.Exit(1)
	}
}

type echoIn struct {
	Message string `json:"message"`
}

func runServer(addr string) error {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-echo", Version: "1.0.0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echoes its message"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Message}}}, nil, nil
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("url=http://%s/mcp\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func runClient(url, tool, tokenFile string, n int) error {
	if url == "" || n < 2 {
		return fmt.Errorf("need -url and -n >= 2")
	}
	hc := &http.Client{}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		hc.Transport = bearer{token: strings.TrimSpace(string(b)), base: http.DefaultTransport}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "mcphttp-bench", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	times := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": "ping"}})
		if err != nil {
			return fmt.Errorf("call %d: %w", i, err)
		}
		if res.IsError {
			return fmt.Errorf("call %d: the tool failed: %+v", i, res.Content)
		}
		times = append(times, time.Since(start))
	}
	first := times[0]
	rest := times[1:]
	sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
	fmt.Printf("median_ns=%d p90_ns=%d first_ns=%d n=%d\n", rest[len(rest)/2].Nanoseconds(), rest[len(rest)*9/10].Nanoseconds(), first.Nanoseconds(), n)
	return nil
}
