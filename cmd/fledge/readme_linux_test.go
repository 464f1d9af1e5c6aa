// SPDX-License-Identifier: MIT

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's quick start and MCP recipe, run as written: the commands are read from the
// README's own ```sh blocks (so these tests break when the README changes), run one by one
// by a user on a terminal (a pseudo-terminal) with a fresh HOME and no config, and what
// the user sees is checked. A README command without an entry in the test's table fails
// the test: whoever changes the README says here what the user should see.

// readmeBlock is the first ```sh block under the "## heading" section of README.md: its
// commands (one a line, comments dropped) and its comments.
func readmeBlock(t *testing.T, heading string) (cmds, comments []string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, block := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			if in && block {
				return cmds, comments
			}
			in = strings.TrimPrefix(line, "## ") == heading
		case in && !block && line == "```sh":
			block = true
		case in && block && line == "```":
			return cmds, comments
		case in && block:
			cmd, comment, _ := strings.Cut(line, "#")
			if c := strings.TrimSpace(comment); c != "" {
				comments = append(comments, c)
			}
			if c := strings.TrimSpace(cmd); c != "" {
				cmds = append(cmds, c)
			}
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, cmds, "README.md has no ```sh block under ## %s", heading)
	return cmds, comments
}

// readmeUser is a user following the README: a fresh HOME (no fledge config, no audit
// log), a scratch directory, fledge on PATH.
type readmeUser struct {
	t   *testing.T
	e   *ptyEnv
	dir string
}

func newReadmeUser(t *testing.T, extraEnv ...string) *readmeUser {
	t.Helper()
	fledge, err := exec.LookPath("fledge") // testscript.Main put this test binary there as "fledge"
	require.NoError(t, err)
	root := t.TempDir()
	e := &ptyEnv{fledge: fledge, home: filepath.Join(root, "home"), work: filepath.Join(root, "scratch")}
	for _, d := range []string{e.home, e.work} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	e.env = append([]string{
		"HOME=" + e.home,
		"PATH=" + filepath.Dir(fledge) + ":/usr/local/bin:/usr/bin:/bin",
		"TERM=xterm-256color", "LANG=C.UTF-8", "NO_COLOR=1",
		"GIT_AUTHOR_NAME=fledge test", "GIT_AUTHOR_EMAIL=test@fledge.invalid",
		"GIT_COMMITTER_NAME=fledge test", "GIT_COMMITTER_EMAIL=test@fledge.invalid",
	}, extraEnv...)
	return &readmeUser{t: t, e: e, dir: e.work}
}

// step is what a README command shows the user: questions it asks and how the user
// answers each (keys), then what the screen must and must not show, and its exit status.
type step struct {
	answers []answer
	want    []string // regexps the screen shows
	never   []string // regexps the screen must not show
	code    int
}

type answer struct {
	question string // regexp of the question on the screen
	keys     []string
}

// run runs one README line: its &&-joined parts in order, cd as a shell does, fledge on
// the terminal as the user would, other programs (mkdir, git) plainly. It returns what the
// fledge parts showed.
func (u *readmeUser) run(line string, steps map[string]step) string {
	u.t.Helper()
	st, ok := steps[line]
	require.True(u.t, ok, "README.md has a command this test does not know: %q: say in the test what the user should see", line)
	var screen strings.Builder
	for _, part := range strings.Split(line, "&&") {
		args := strings.Fields(part)
		switch args[0] {
		case "cd":
			require.Len(u.t, args, 2, line)
			u.dir = filepath.Join(u.dir, args[1])
		case "fledge":
			u.e.work = u.dir
			p := u.e.startArgs(u.t, false, args[1:]...)
			for _, a := range st.answers {
				p.waitFor(a.question)
				p.press(a.keys...)
			}
			code := p.exit()
			out := p.screen.String()
			assert.Equal(u.t, st.code, code, "%s: screen:\n%s", part, out)
			screen.WriteString(out)
		default:
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir, cmd.Env = u.dir, u.e.env
			out, err := cmd.CombinedOutput()
			require.NoError(u.t, err, "%s: %s", part, out)
		}
	}
	out := screen.String()
	for _, re := range st.want {
		assert.Regexp(u.t, re, out, "%s", line)
	}
	for _, re := range st.never {
		assert.NotRegexp(u.t, re, out, "%s", line)
	}
	return out
}

// yes accepts a yes/no question on the terminal.
var yes = []string{"y"}

func TestReadmeQuickStart(t *testing.T) {
	cmds, _ := readmeBlock(t, "Quick start")
	noProject := `no project here`
	steps := map[string]step{
		"fledge plugins new hello --lang bash": {want: []string{`created bash plugin "hello" in \./hello`}},
		"fledge plugins install ./hello": {
			answers: []answer{{`Grant store to hello`, yes}, {`Grant filesystem=project to hello`, yes}},
			want:    []string{`installed hello 0\.1\.0 \(commands: hello; granted: store,filesystem=project`},
		},
		"mkdir my-project && cd my-project && git init": {},
		"fledge hello": {
			answers: []answer{{`Who should I greet\?`, []string{keyEnter}}},
			want:    []string{`Hello, world! This is run #1 of hello\.`},
			never:   []string{noProject, `warning`},
		},
		"fledge --ni hello": {
			want:  []string{`Hello, world! This is run #2 of hello\.`},
			never: []string{noProject, `warning`},
		},
		"fledge audit show --plugin hello": {want: []string{`plugin_start`, `plugin_exit`}},
		"fledge doctor":                    {want: []string{`confinement: `, `audit log: `}},
	}
	u := newReadmeUser(t)
	for _, c := range cmds {
		u.run(c, steps)
	}
	// The runs had the project the quick start made: the plugin, which may read the
	// project, started where the user stood in it (without a project: its data dir).
	cmd := exec.Command(u.e.fledge, "audit", "show", "--plugin", "hello", "--event", "plugin_start", "--json")
	cmd.Dir, cmd.Env = u.dir, u.e.env
	out, err := cmd.Output()
	require.NoError(t, err)
	want, err := filepath.EvalSymlinks(u.dir)
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(out), `"cwd_resolved":"`+want+`"`), "%s", out)
}

// TestReadmeMCPRecipe installs the server the README names from npm (the registry is
// needed once; npm's cache serves later runs), points an MCP client at the command the
// README gives, and reads the audit log as it says.
func TestReadmeMCPRecipe(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed")
	}
	if c, err := net.DialTimeout("tcp", "registry.npmjs.org:443", 5*time.Second); err != nil {
		t.Skipf("the npm registry is not reachable: %v", err)
	} else {
		c.Close()
	}
	cmds, comments := readmeBlock(t, "MCP: fledge between an MCP client and its servers")
	realHome, err := os.UserHomeDir()
	require.NoError(t, err)
	u := newReadmeUser(t, "npm_config_cache="+filepath.Join(realHome, ".npm"), "npm_config_update_notifier=false")
	// The client's open folder, with a file the server may read, and a key it may not.
	folder := filepath.Join(u.e.work, "folder")
	require.NoError(t, os.MkdirAll(folder, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(folder, "notes.txt"), []byte("hello from the folder\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(u.e.home, ".ssh"), 0o700))
	key := filepath.Join(u.e.home, ".ssh", "id_ed25519")
	require.NoError(t, os.WriteFile(key, []byte("readme-test-private-key\n"), 0o600))

	steps := map[string]step{
		"fledge plugins install npm:@modelcontextprotocol/server-filesystem": {
			answers: []answer{{`Grant [^\n]*server-filesystem[^\n]*\?`, yes}},
			want:    []string{`installed server-filesystem `, `plugin_server-filesystem_read_text_file`},
		},
		// What the server did, the refused read of the key included.
		"fledge audit show --plugin server-filesystem": {want: []string{`tool_call +allow`, `tool_outcome +allow +ok`, `tool_outcome +error +tool_error`}},
	}
	require.Len(t, cmds, 2, "install, then audit show: %q", cmds)
	u.run(cmds[0], steps)

	// Step 2: the client's server config, as the README gives it.
	var server struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	cfg := regexp.MustCompile(`\{"command".*\}`)
	for _, c := range comments {
		if m := cfg.FindString(c); m != "" {
			require.NoError(t, json.Unmarshal([]byte(m), &server), m)
		}
	}
	require.Equal(t, "fledge", server.Command, "README's MCP client config: %q", comments)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "readme-client", Version: "1"}, nil)
	//lint:ignore SA1019 the README's client names its folder as an MCP root, as editors do today
	client.AddRoots(&mcpsdk.Root{URI: "file://" + folder, Name: "folder"})
	var serverErr syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fledge serve --mcp stderr:\n%s", serverErr.String())
		}
	})
	// The initialize handshake the editors the README names speak (2025-11-25), in which
	// the client lists its roots. (A 2026-07-28 client's stateless server/discover sends no
	// initialized notification and lists no roots: fledge then serves without a project.)
	// The filesystem server is started with the project as its argument (fledge's defaults
	// for it), so its first call does not depend on when it applies the roots it is sent:
	// one session, held to every check.
	cmd := exec.Command(u.e.fledge, server.Args...) // "fledge" from the user's PATH
	cmd.Dir, cmd.Env = "/", u.e.env                 // as an editor starts it
	cmd.Stderr = &serverErr
	sess, err := client.Connect(ctx, &mcpsdk.CommandTransport{Command: cmd}, &mcpsdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	require.NoError(t, err)
	read := func(path string) (string, bool) {
		res, err := sess.CallTool(ctx, &mcpsdk.CallToolParams{Name: "plugin_server-filesystem_read_text_file", Arguments: map[string]any{"path": path}})
		require.NoError(t, err)
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcpsdk.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		return strings.Join(text, "\n"), res.IsError
	}
	text, isErr := read(filepath.Join(folder, "notes.txt"))
	assert.False(t, isErr, text)
	assert.Contains(t, text, "hello from the folder", "the client's open folder is the project")
	text, isErr = read(key)
	assert.True(t, isErr, text)
	assert.NotContains(t, text, "readme-test-private-key", "nothing else of the disk is reachable")
	require.NoError(t, sess.Close())

	u.run(cmds[1], steps)
}
