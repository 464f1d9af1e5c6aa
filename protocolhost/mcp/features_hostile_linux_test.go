// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/reason"
)

// goClient is the official Go SDK's client connected to Serve over pipes, counting what
// fledge passes on to it.
type goClient struct {
	cs             *mcpsdk.ClientSession
	logs           atomic.Int32
	sampled        atomic.Int32
	elicited       atomic.Int32
	promptsChanged chan struct{}
	resChanged     chan struct{}
}

func serveGoClient(t *testing.T, f *fixture) *goClient {
	t.Helper()
	cat := f.catalogue()
	ctx, cancel := context.WithCancel(context.Background())
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, cat, sr, sw, ServeOptions{LineMax: 1 << 20}) }()
	gc := &goClient{promptsChanged: make(chan struct{}, 8), resChanged: make(chan struct{}, 8)}
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "go-test-client", Version: "1"}, &mcpsdk.ClientOptions{
		Capabilities: &mcpsdk.ClientCapabilities{},
		CreateMessageHandler: func(context.Context, *mcpsdk.CreateMessageRequest) (*mcpsdk.CreateMessageResult, error) {
			gc.sampled.Add(1)
			return &mcpsdk.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcpsdk.TextContent{Text: "leaked"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcpsdk.ElicitRequest) (*mcpsdk.ElicitResult, error) {
			gc.elicited.Add(1)
			return &mcpsdk.ElicitResult{Action: "decline"}, nil
		},
		LoggingMessageHandler: func(context.Context, *mcpsdk.LoggingMessageRequest) { gc.logs.Add(1) },
		ResourceListChangedHandler: func(context.Context, *mcpsdk.ResourceListChangedRequest) {
			select {
			case gc.resChanged <- struct{}{}:
			default:
			}
		},
		PromptListChangedHandler: func(context.Context, *mcpsdk.PromptListChangedRequest) {
			select {
			case gc.promptsChanged <- struct{}{}:
			default:
			}
		},
	})
	cs, err := client.Connect(ctx, &mcpsdk.IOTransport{Reader: cr, Writer: cw}, nil)
	require.NoError(t, err)
	gc.cs = cs
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			t.Error("Serve did not end within 30s")
		}
	})
	return gc
}

func promptNames(t *testing.T, cs *mcpsdk.ClientSession) map[string]string {
	t.Helper()
	res, err := cs.ListPrompts(context.Background(), nil)
	require.NoError(t, err)
	out := map[string]string{}
	for _, p := range res.Prompts {
		out[p.Name] = p.Description
	}
	return out
}

func callText1(t *testing.T, cs *mcpsdk.ClientSession, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: name, Arguments: map[string]any{}})
	require.NoError(t, err)
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// A hostile MCP server behind serve --mcp, granted neither sampling nor elicitation: its
// requests for them never reach the client (a clean error to the server, a deny record by
// kind and size, not text); its flood of log messages reaches the client bounded, the
// rest dropped on record; its prompt described anew (an instruction to the model) is held
// back at once and the client told, until the user approves it; its terminal sequences
// never reach the client.
func TestHostileServerPromptsLogsSamplingThroughServe(t *testing.T) {
	f := hostile(t, "prompter")
	const name = "hostile-prompter"
	c := serveGoClient(t, f)
	cs := c.cs

	prompts := promptNames(t, cs)
	require.Contains(t, prompts, "plugin_"+name+"_review")
	require.Contains(t, prompts, "plugin_"+name+"_stay")
	assert.Equal(t, "Stays as it is.", prompts["plugin_"+name+"_stay"], "terminal sequences are stripped")
	got, err := cs.GetPrompt(context.Background(), &mcpsdk.GetPromptParams{Name: "plugin_" + name + "_review", Arguments: map[string]string{"file": "a.go"}})
	require.NoError(t, err)
	assert.Equal(t, "prompt review", got.Messages[0].Content.(*mcpsdk.TextContent).Text, "the prompt is got by its own name")

	// Sampling and elicitation without the grant.
	text := callText1(t, cs, "plugin_"+name+"_sample")
	assert.Contains(t, text, "refused: plugin hostile-prompter was not granted sampling")
	text = callText1(t, cs, "plugin_"+name+"_elicit")
	assert.Contains(t, text, "refused: plugin hostile-prompter was not granted elicitation")
	assert.Zero(t, c.sampled.Load(), "the client was never asked to sample")
	assert.Zero(t, c.elicited.Load(), "the client was never asked")
	reqs := f.records(audit.EventClientRequest)
	require.Len(t, reqs, 2)
	for i, kind := range []string{"sampling", "elicitation"} {
		assert.Equal(t, audit.Deny, reqs[i].Decision)
		assert.Equal(t, string(reason.CapabilityNotGranted), reqs[i].Reason)
		assert.Equal(t, kind, reqs[i].Details["kind"])
		assert.NotZero(t, reqs[i].Details["request_bytes"])
		raw, _ := json.Marshal(reqs[i])
		assert.NotContains(t, string(raw), "secret question")
		assert.NotContains(t, string(raw), "password please")
	}

	// A flood of 500 log messages at once: a bounded number reaches the client.
	require.NoError(t, cs.SetLoggingLevel(context.Background(), &mcpsdk.SetLoggingLevelParams{Level: "debug"}))
	assert.Equal(t, "flooded", callText1(t, cs, "plugin_"+name+"_logflood"))
	// The messages are passed on apart from the call's answer: wait for the first to reach
	// the client and for the drop to be on record, however long a loaded machine takes.
	logDropped := func() bool {
		for _, r := range f.records(audit.EventLimit) {
			if r.Details[audit.DetailLimit] == "log_messages" {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return c.logs.Load() > 0 && logDropped() }, 30*time.Second, 20*time.Millisecond,
		"no log message reached the client, or no drop is on record")
	n := c.logs.Load()
	t.Logf("log flood: 500 sent, %d passed on to the client", n)
	assert.Positive(t, n, "log messages pass on")
	assert.LessOrEqual(t, n, int32(logBurst+int(logRate)*5), "at most the burst and the rate pass on")
	var dropped bool
	for _, r := range f.records(audit.EventLimit) {
		if r.Details[audit.DetailLimit] == "log_messages" {
			dropped = true
			assert.Equal(t, string(reason.LimitExceeded), r.Reason)
		}
	}
	assert.True(t, dropped, "the drop is on record")

	// Resources and templates, wrapped; a read reaches the server under its own URI.
	assert.Equal(t, []string{"fledge:" + name + "/hostile://a"}, resourceURIs(t, cs))
	assert.Equal(t, []string{"fledge:" + name + "/hostile://t/{id}"}, templateURIs(t, cs))
	rr, err := cs.ReadResource(context.Background(), &mcpsdk.ReadResourceParams{URI: "fledge:" + name + "/hostile://t/9"})
	require.NoError(t, err)
	assert.Equal(t, "read hostile://t/9", rr.Contents[0].Text)
	assert.Equal(t, "fledge:"+name+"/hostile://t/9", rr.Contents[0].URI)

	// The rug pull: review described anew. The client hears of it (a notification after
	// the pull: those of the first offer are drained first).
	for drained := false; !drained; {
		select {
		case <-c.promptsChanged:
		default:
			drained = true
		}
	}
	assert.Equal(t, "pulled", callText1(t, cs, "plugin_"+name+"_pull"))
	select {
	case <-c.promptsChanged:
	case <-time.After(15 * time.Second):
		t.Fatal("the client was not told the prompts changed")
	}
	prompts = promptNames(t, cs)
	assert.NotContains(t, prompts, "plugin_"+name+"_review", "the changed prompt is held back")
	assert.Contains(t, prompts, "plugin_"+name+"_stay")
	_, err = cs.GetPrompt(context.Background(), &mcpsdk.GetPromptParams{Name: "plugin_" + name + "_review", Arguments: map[string]string{"file": "a.go"}})
	require.Error(t, err, "a held-back prompt cannot be got")
	// The resource it added joins the list, the template described anew leaves it, and
	// the client is told.
	select {
	case <-c.resChanged:
	case <-time.After(15 * time.Second):
		t.Fatal("the client was not told the resources changed")
	}
	assert.Equal(t, []string{"fledge:" + name + "/hostile://a", "fledge:" + name + "/hostile://b"}, resourceURIs(t, cs))
	assert.Empty(t, templateURIs(t, cs), "the changed template is held back")
	changed := map[string]bool{}
	for _, r := range f.records(audit.EventToolChanged) {
		if d, ok := r.Details["definition"].(string); ok {
			changed[d] = true
			assert.Equal(t, audit.Deny, r.Decision)
		}
	}
	assert.Equal(t, map[string]bool{"prompt:review": true, "resource-template:hostile://t/{id}": true}, changed, "the changes are on record")

	// Approved, it comes back as it now reads.
	_, err = pins.Approve(f.configDir, name)
	require.NoError(t, err)
	var back string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if d, ok := promptNames(t, cs)["plugin_"+name+"_review"]; ok {
			back = d
			break
		}
	}
	assert.Contains(t, back, "id_rsa", "the approved description is offered")
	assert.Equal(t, []string{"fledge:" + name + "/hostile://t/{id}"}, templateURIs(t, cs), "the approved template is offered")
}

func resourceURIs(t *testing.T, cs *mcpsdk.ClientSession) []string {
	t.Helper()
	var out []string
	for r, err := range cs.Resources(context.Background(), nil) {
		require.NoError(t, err)
		out = append(out, r.URI)
	}
	sort.Strings(out)
	return out
}

func templateURIs(t *testing.T, cs *mcpsdk.ClientSession) []string {
	t.Helper()
	out := []string{}
	for r, err := range cs.ResourceTemplates(context.Background(), nil) {
		require.NoError(t, err)
		out = append(out, r.URITemplate)
	}
	return out
}

// sampling granted later (`fledge plugins grant`) to an installed MCP server: its next
// session is offered sampling and its request reaches the client, on record as allowed;
// the same grant to a plugin that is no MCP server is refused.
func TestSamplingGrantedLaterReachesClient(t *testing.T) {
	fledge := buildFledge(t) // before the fixture narrows PATH
	f := hostile(t, "prompter")
	const name = "hostile-prompter"
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	out, errOut, err := c.run(f.project, "--ni", "plugins", "grant", name, "sampling")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	f.install(filepath.Join("testdata", "rt"))
	out, errOut, err = c.run(f.project, "--ni", "plugins", "grant", "rt", "sampling")
	require.Error(t, err, "stdout: %s", out)
	assert.Contains(t, errOut, "for MCP servers only")

	gc := serveGoClient(t, f)
	text := callText1(t, gc.cs, "plugin_"+name+"_sample")
	assert.Contains(t, text, "answered:")
	assert.Contains(t, text, "leaked", "the client's answer reaches the server")
	assert.Equal(t, int32(1), gc.sampled.Load())
	text = callText1(t, gc.cs, "plugin_"+name+"_elicit")
	assert.Contains(t, text, "not granted elicitation", "only what was granted")
	reqs := f.records(audit.EventClientRequest)
	require.Len(t, reqs, 2)
	assert.Equal(t, audit.Allow, reqs[0].Decision)
	assert.Equal(t, "sampling", reqs[0].Details["kind"])
	assert.Equal(t, audit.Deny, reqs[1].Decision)
	resp := f.records(audit.EventClientResponse)
	require.Len(t, resp, 1)
	assert.NotZero(t, resp[0].Details["response_bytes"])
	var grants []string
	for _, r := range f.records(audit.EventGrant) {
		grants = append(grants, string(r.Decision)+" "+r.Details[audit.DetailCapability].(string))
	}
	assert.Equal(t, []string{"allow sampling", "deny sampling"}, grants)
}
