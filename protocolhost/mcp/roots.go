// SPDX-License-Identifier: MIT

//lint:file-ignore SA1019 MCP roots are deprecated by SEP-2577 but functional for at least twelve months, and they are how clients today name the project they mean; this file is the one place fledge uses them.

package mcp

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// errRejected is the SDK's "rejected by transport" (its jsonrpc2.ErrRejected code).
var errRejected = &jsonrpc.Error{Code: -32005}

// declareRoots makes fledge's client say it lists roots.
func declareRoots(caps *mcpsdk.ClientCapabilities) { caps.RootsV2 = &mcpsdk.RootCapabilities{} }

// addRoot is one root fledge's client lists to its server.
func addRoot(c *mcpsdk.Client, uri, name string) { c.AddRoots(&mcpsdk.Root{URI: uri, Name: name}) }

// offersRoots reports whether the client of fledge's server said it can list roots.
func offersRoots(ss *mcpsdk.ServerSession) bool {
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil {
		return false
	}
	return p.Capabilities.RootsV2 != nil || p.Capabilities.Roots.ListChanged
}

// clientRoot asks the client for its roots and returns the path of the first file:// one
// ("" for none).
func clientRoot(ctx context.Context, ss *mcpsdk.ServerSession) (string, error) {
	res, err := ss.ListRoots(ctx, nil)
	// Over Streamable HTTP a request to the client travels on the stream the client
	// opens (GET) once initialized: until then the transport rejects it, and it is
	// asked again until ctx (rootsWait) ends.
	for err != nil && errors.Is(err, errRejected) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
			res, err = ss.ListRoots(ctx, nil)
		}
	}
	if err != nil || res == nil {
		return "", err
	}
	for _, r := range res.Roots {
		if r == nil {
			continue
		}
		u, err := url.Parse(r.URI)
		if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
			continue
		}
		return filepath.Clean(u.Path), nil
	}
	return "", nil
}
