// Command ociserver is the MCP server of the image tests: a static binary put into an
// image, whose tools report what it sees from inside its view.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type pathArg struct {
	Path string `json:"path"`
}

type writeArg struct {
	Path string `json:"path"`
	Text string `json:"text"`
}

func text(s string, isErr bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}, IsError: isErr}
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "ociserver", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "read", Description: "read a file"}, func(_ context.Context, _ *mcp.CallToolRequest, a pathArg) (*mcp.CallToolResult, any, error) {
		b, err := os.ReadFile(a.Path)
		if err != nil {
			return text("error: "+err.Error(), true), nil, nil
		}
		return text(string(b), false), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "write", Description: "write a file"}, func(_ context.Context, _ *mcp.CallToolRequest, a writeArg) (*mcp.CallToolResult, any, error) {
		if err := os.WriteFile(a.Path, []byte(a.Text), 0o644); err != nil {
			return text("error: "+err.Error(), true), nil, nil
		}
		return text("written", false), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "probe", Description: "what the server sees"}, func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		cwd, _ := os.Getwd()
		var root []string
		if ents, err := os.ReadDir("/"); err == nil {
			for _, e := range ents {
				root = append(root, e.Name())
			}
		}
		sort.Strings(root)
		env := os.Environ()
		sort.Strings(env)
		return text(fmt.Sprintf("cwd=%s\nuid=%d\nroot=%s\nenv=%s\n", cwd, os.Getuid(), strings.Join(root, ","), strings.Join(env, "|")), false), nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
