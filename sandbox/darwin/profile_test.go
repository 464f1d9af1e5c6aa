// SPDX-License-Identifier: MIT

package darwin

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The fixtures follow the policy of the Linux sandbox and plugin-confinement issues, spelled
// the macOS way: config and state under ~/Library-free XDG-style dirs the host uses.
const (
	home     = "/Users/ann"
	project  = "/Users/ann/src/app"
	config   = "/Users/ann/.config/fledge"
	state    = "/Users/ann/.local/state/fledge"
	plugDir  = "/Users/ann/.config/fledge/plugins/hello"
	dataDir  = "/Users/ann/.config/fledge/plugins/hello/data"
	stateJS  = "/Users/ann/.config/fledge/plugins/hello/state.json"
	otherJS  = "/Users/ann/.config/fledge/plugins/other/state.json"
	stubBin  = "/Users/ann/go/bin/fledge"
	tempDir  = "/tmp/fledge-exec-1234"
	tempReal = "/private/tmp/fledge-exec-1234"
)

var systemRX = []string{"/usr", "/bin", "/sbin", "/opt/homebrew/bin"}

func execSpec(network bool) *sandbox.Spec {
	return &sandbox.Spec{
		Kind: sandbox.KindExec, Name: "hello", Path: "/bin/sh", Args: []string{"sh", "-c", "make"},
		DirPath: project,
		Access: sandbox.Access{
			ReadWrite: []string{project, plugDir},
			ReadExec:  systemRX,
			Deny:      []string{config, state},
		},
		Network: network, PrivateTmp: true,
	}
}

// pluginSpec builds the plugin profile for a filesystem grant (none | project | plugin).
func pluginSpec(grant string, network bool) *sandbox.Spec {
	s := &sandbox.Spec{
		Kind: sandbox.KindPlugin, Name: "hello", Path: plugDir + "/bin/hello",
		Access: sandbox.Access{
			ReadOnly:  []string{plugDir},
			ReadWrite: []string{dataDir},
			ReadExec:  append(append([]string{}, systemRX...), plugDir+"/bin"),
			Deny:      []string{config, state, stateJS},
		},
		Network: network, PrivateTmp: true,
	}
	if grant == "project" {
		s.Access.ReadOnly = append(s.Access.ReadOnly, project)
	}
	return s
}

// denyInsideRW: a Deny path inside a writable project (Seatbelt can subtract; Landlock
// refuses such a spec).
func denyInsideRW() *sandbox.Spec {
	return &sandbox.Spec{
		Kind: sandbox.KindExec, Name: "hello", Path: "/bin/sh",
		Access: sandbox.Access{
			ReadWrite: []string{project},
			ReadExec:  systemRX,
			Deny:      []string{project + "/.fledge/secrets"},
		},
	}
}

func goldenOpts() ProfileOptions {
	return ProfileOptions{Stub: stubBin, TempDir: tempDir, Resolve: PrivateAliases}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".sb.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./sandbox/darwin -update")
	assert.Equal(t, string(want), got, "profile differs from %s (go test -update to accept)", path)
}

type goldenCase struct {
	name string
	spec *sandbox.Spec
}

func goldenCases() []goldenCase {
	legacy := &sandbox.Spec{
		Kind: sandbox.KindLegacy, Name: "old", Path: "/Users/ann/.config/fledge/plugins/old/run",
		Access: sandbox.Access{
			ReadWrite: []string{project},
			ReadExec:  append(append([]string{}, systemRX...), "/Users/ann/.config/fledge/plugins/old"),
			Deny:      []string{config, state},
		},
		Network: true,
	}
	hostile := &sandbox.Spec{
		Kind: sandbox.KindExec, Name: "evil\")(allow default)\n;",
		Path: "/bin/sh",
		Access: sandbox.Access{
			ReadWrite: []string{
				`/Users/ann/src/a"b`,
				`/Users/ann/src/back\slash`,
				`/Users/ann/src/paren) (allow default) ("`,
				"/Users/ann/src/ünïcødé 日本 🦊",
				"/Users/ann/src/semi;colon #|x|#",
			},
			ReadExec: systemRX,
			Deny:     []string{`/Users/ann/.config/fl"edge\`},
		},
	}
	return []goldenCase{
		{"exec_network", execSpec(true)},
		{"exec_no_network", execSpec(false)},
		{"plugin_fs_none", pluginSpec("none", false)},
		{"plugin_fs_project", pluginSpec("project", false)},
		{"plugin_fs_plugin_network", pluginSpec("plugin", true)},
		{"legacy", legacy},
		{"hostile_paths", hostile},
		{"deny_inside_read_write", denyInsideRW()},
	}
}

func TestProfileGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Profile(tc.spec, goldenOpts())
			require.NoError(t, err)
			checkGolden(t, tc.name, got)

			forms, err := parseSBPL(got)
			require.NoError(t, err, "generated profile is not well-formed SBPL")
			require.NotEmpty(t, forms)
			assert.Equal(t, "(version 1)", forms[0].String())
			assert.Equal(t, "(deny default)", forms[1].String())

			// Every path that went in comes back out of a string literal unchanged.
			emitted := map[string]bool{}
			for _, r := range rulesOf(forms) {
				for _, p := range pathsOf(r) {
					emitted[p] = true
				}
			}
			a := tc.spec.Access
			for _, list := range [][]string{a.ReadWrite, a.ReadOnly, a.ReadExec, a.Deny} {
				for _, p := range list {
					assert.True(t, emitted[p], "path %q lost in the profile", p)
				}
			}
		})
	}
}

// TestProfileHostileNameStaysComment: the spec name only ever lands in a comment, and a
// newline in it cannot start a new form.
func TestProfileHostileNameStaysComment(t *testing.T) {
	s := execSpec(false)
	s.Name = "x\n(allow default)"
	got, err := Profile(s, goldenOpts())
	require.NoError(t, err)
	forms, err := parseSBPL(got)
	require.NoError(t, err)
	for _, f := range forms {
		assert.NotEqual(t, "(allow default)", f.String())
	}
}

// TestDenyAfterAllows: for every Deny path, every file/exec allow rule whose filter covers it
// (the same path or an ancestor) comes earlier in the profile, so the deny is the last match
// and wins. The only file/exec allows after any deny are those nested strictly inside some
// Deny path (the exceptions the host carved out, like a plugin's data dir), and stat-only
// literals on the ancestors of such an exception (so realpath() of the data dir works): they
// expose one directory's metadata, never its listing or any file in it.
func TestDenyAfterAllows(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Profile(tc.spec, goldenOpts())
			require.NoError(t, err)
			forms, err := parseSBPL(got)
			require.NoError(t, err)
			rules := rulesOf(forms)

			denyAt := map[string]int{}
			for _, r := range rules {
				if r.action == "deny" {
					for _, p := range pathsOf(r) {
						denyAt[p] = r.index
					}
				}
			}
			for _, d := range tc.spec.Access.Deny {
				at, ok := denyAt[d]
				require.True(t, ok, "no deny rule for %q", d)
				var nested []string
				for _, r := range rules {
					if r.action == "allow" && fileOrExec(r) && !metadataOnly(r) {
						for _, p := range pathsOf(r) {
							if strictlyUnderAny(p, tc.spec.Access.Deny) {
								nested = append(nested, p)
							}
						}
					}
				}
				for _, r := range rules {
					if r.action != "allow" || !fileOrExec(r) {
						continue
					}
					if metadataOnly(r) {
						for _, f := range r.filters {
							require.Equal(t, "literal", f.list[0].atom, "stat-only rules are literals: %s", forms[r.index])
						}
						if r.index > at {
							for _, p := range pathsOf(r) {
								assert.True(t, ancestorOfAny(p, nested), "stat-only %q after the deny of %q is no ancestor of a nested allow", p, d)
							}
						}
						continue
					}
					for _, p := range pathsOf(r) {
						if within(d, p) { // the allow covers the denied path
							assert.Less(t, r.index, at, "allow %s comes after deny of %q", forms[r.index], d)
						} else if r.index > at {
							assert.True(t, strictlyUnderAny(p, tc.spec.Access.Deny),
								"allow %s follows the deny of %q but is not nested in a Deny path", forms[r.index], d)
						}
					}
				}
			}
		})
	}
}

func fileOrExec(r rule) bool {
	for _, o := range r.ops {
		if strings.HasPrefix(o, "file-") || strings.HasPrefix(o, "process-exec") {
			return true
		}
	}
	return false
}

func metadataOnly(r rule) bool {
	return len(r.ops) == 1 && r.ops[0] == "file-read-metadata"
}

func ancestorOfAny(p string, paths []string) bool {
	for _, q := range paths {
		if q != p && within(q, p) {
			return true
		}
	}
	return false
}

func strictlyUnderAny(p string, roots []string) bool {
	for _, r := range roots {
		if p != r && within(p, r) {
			return true
		}
	}
	return false
}

// TestProfileSemantics evaluates the profiles with Seatbelt's last-match rule and checks the
// policy path by path: what a plugin and its commands may read, write and run on macOS.
func TestProfileSemantics(t *testing.T) {
	type q struct {
		op, target, want string
	}
	cases := []struct {
		name string
		spec *sandbox.Spec
		qs   []q
	}{
		{"exec", execSpec(false), []q{
			{"file-read-data", project + "/main.go", "allow"},
			{"file-write-create", project + "/out/bin", "allow"},
			{"file-write-data", plugDir + "/cache", "allow"},
			{"file-write-data", tempReal + "/x", "allow"},
			{"file-read-data", "/usr/lib/libSystem.B.dylib", "allow"},
			{"process-exec", "/bin/sh", "allow"},
			{"process-exec", "/opt/homebrew/bin/jq", "allow"},
			{"process-exec", stubBin, "allow"},
			{"process-exec", project + "/evil", "deny"},
			{"process-exec", tempReal + "/dropped", "deny"},
			{"file-read-data", home + "/.ssh/id_rsa", "deny"},
			{"file-read-data", home + "/.aws/credentials", "deny"},
			{"file-read-data", config + "/plugins.toml", "deny"},
			{"file-write-data", config + "/plugins.toml", "deny"},
			{"file-read-data", otherJS, "deny"},
			{"file-read-data", state + "/audit.jsonl", "deny"},
			{"file-write-data", "/usr/local/bin/x", "deny"},
			{"file-write-data", "/private/tmp/other", "deny"},
			{"file-read-metadata", home, "allow"},
			{"file-read-data", home, "deny"}, // stat, never readdir
			{"file-read-metadata", config, "allow"},
			{"file-read-data", config, "deny"},
			{"file-write-data", "/dev/null", "allow"},
			{"network-outbound", "remote-ip", "deny"},
			{"network-bind", "local-ip", "deny"},
		}},
		{"exec network", execSpec(true), []q{
			{"network-outbound", "remote-ip", "allow"},
			{"network-bind", "local-ip", "allow"},
			{"network-outbound", "unix:/private/var/run/mDNSResponder", "allow"},
			{"network-outbound", "unix:" + home + "/.docker/run/docker.sock", "deny"},
		}},
		{"deny inside read-write", denyInsideRW(), []q{
			{"file-write-data", project + "/main.go", "allow"},
			{"file-read-data", project + "/.fledge/secrets/key", "deny"},
			{"file-write-create", project + "/.fledge/secrets/new", "deny"},
			{"file-write-unlink", project + "/.fledge/secrets", "deny"},
			{"file-write-unlink", project + "/.fledge", "deny"}, // no rename from under the rule
			{"file-write-create", project + "/.fledge/other", "allow"},
			{"file-write-unlink", project + "/other", "allow"},
		}},
		{"plugin none", pluginSpec("none", false), []q{
			{"file-read-data", plugDir + "/plugin.toml", "allow"},
			{"file-write-data", plugDir + "/plugin.toml", "deny"},
			{"file-write-data", plugDir + "/bin/hello", "deny"},
			{"process-exec", plugDir + "/bin/hello", "allow"},
			{"file-write-data", dataDir + "/kv", "allow"},
			{"file-read-data", stateJS, "deny"},
			{"file-read-data", otherJS, "deny"},
			{"file-read-data", config + "/plugins.toml", "deny"},
			{"file-read-data", project + "/main.go", "deny"},
			{"file-write-data", tempReal + "/x", "allow"},
			{"network-outbound", "remote-ip", "deny"},
		}},
		{"plugin project", pluginSpec("project", false), []q{
			{"file-read-data", project + "/main.go", "allow"},
			{"file-write-data", project + "/main.go", "deny"},
			{"file-read-data", stateJS, "deny"},
		}},
		{"plugin plugin", pluginSpec("plugin", true), []q{
			{"file-read-data", project + "/main.go", "deny"},
			{"file-write-data", dataDir + "/kv", "allow"},
			{"network-outbound", "remote-ip", "allow"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Profile(tc.spec, goldenOpts())
			require.NoError(t, err)
			forms, err := parseSBPL(got)
			require.NoError(t, err)
			rules := rulesOf(forms)
			for _, q := range tc.qs {
				act, at := decide(rules, q.op, q.target)
				why := "(deny default)"
				if at >= 0 {
					why = forms[at].String()
				}
				assert.Equal(t, q.want, act, "%s %s decided by %s", q.op, q.target, why)
			}
		})
	}
}

func TestProfileRefuses(t *testing.T) {
	failResolve := func(string) (string, error) { return "", errors.New("boom") }
	badResolve := func(string) (string, error) { return "/x\n/y", nil }
	cases := []struct {
		name string
		path string
		list string
		opts ProfileOptions
	}{
		{"nul", "/Users/ann/a\x00b", "read_write", ProfileOptions{}},
		{"newline", "/Users/ann/a\nb", "read_write", ProfileOptions{}},
		{"carriage return", "/Users/ann/a\rb", "deny", ProfileOptions{}},
		{"tab", "/Users/ann/a\tb", "read_only", ProfileOptions{}},
		{"del", "/Users/ann/a\x7fb", "read_exec", ProfileOptions{}},
		{"invalid utf8", "/Users/ann/\xff\xfe", "read_write", ProfileOptions{}},
		{"relative", "src/app", "read_write", ProfileOptions{}},
		{"root", "/", "read_only", ProfileOptions{}},
		{"root slashes", "//", "deny", ProfileOptions{}},
		{"dotdot", "/Users/ann/src/../.ssh", "read_write", ProfileOptions{}},
		{"double slash", "/Users//ann", "read_write", ProfileOptions{}},
		{"dot", "/Users/./ann", "read_exec", ProfileOptions{}},
		{"resolver fails", "/Users/ann/src", "read_write", ProfileOptions{Resolve: failResolve}},
		{"resolver returns newline", "/Users/ann/src", "read_write", ProfileOptions{Resolve: badResolve}},
		{"stub newline", "", "stub", ProfileOptions{Stub: "/bin/fl\nedge"}},
		{"temp relative", "", "temp", ProfileOptions{TempDir: "tmp"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &sandbox.Spec{Kind: sandbox.KindExec}
			switch tc.list {
			case "read_write":
				s.Access.ReadWrite = []string{tc.path}
			case "read_only":
				s.Access.ReadOnly = []string{tc.path}
			case "read_exec":
				s.Access.ReadExec = []string{tc.path}
			case "deny":
				s.Access.Deny = []string{tc.path}
			}
			got, err := Profile(s, tc.opts)
			require.Error(t, err)
			assert.Empty(t, got)
			assert.ErrorIs(t, err, sandbox.ErrInvalidSpec)
			var pe *PathError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.list, pe.List)
		})
	}

	_, err := Profile(nil, ProfileOptions{})
	assert.ErrorIs(t, err, sandbox.ErrInvalidSpec)
	_, err = Profile(&sandbox.Spec{Kind: "daemon"}, ProfileOptions{})
	assert.ErrorIs(t, err, ErrBadKind)
	assert.ErrorIs(t, err, sandbox.ErrInvalidSpec)
}

func TestProfileTrailingSlashAndDedupe(t *testing.T) {
	s := &sandbox.Spec{Kind: sandbox.KindExec, Access: sandbox.Access{
		ReadWrite: []string{"/Users/ann/src/app/", "/Users/ann/src/app"},
	}}
	got, err := Profile(s, ProfileOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(got, `(allow file-read* file-write* (subpath "/Users/ann/src/app"))`))
	assert.NotContains(t, got, `app/"`)
}

func TestProfileDeterministic(t *testing.T) {
	a, err := Profile(pluginSpec("project", true), goldenOpts())
	require.NoError(t, err)
	s := pluginSpec("project", true)
	// Same policy in another order gives the same bytes.
	ro := s.Access.ReadOnly
	ro[0], ro[len(ro)-1] = ro[len(ro)-1], ro[0]
	d := s.Access.Deny
	d[0], d[len(d)-1] = d[len(d)-1], d[0]
	b, err := Profile(s, goldenOpts())
	require.NoError(t, err)
	assert.Equal(t, a, b)
}

func TestQuote(t *testing.T) {
	cases := []struct{ in, want string }{
		{"/usr", `"/usr"`},
		{`/a"b`, `"/a\"b"`},
		{`/a\b`, `"/a\\b"`},
		{`/a\"`, `"/a\\\""`},
		{"/(x) ;y", `"/(x) ;y"`},
		{"/日本", `"/日本"`},
	}
	for _, tc := range cases {
		got, err := Quote(tc.in)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	for _, bad := range []string{"\x00", "a\nb", "\r", "\x1b[31m", "\x7f", "\xc3"} {
		_, err := Quote(bad)
		assert.ErrorIs(t, err, ErrBadPath, "%q", bad)
	}
}

func TestPrivateAliases(t *testing.T) {
	cases := []struct{ in, want string }{
		{"/tmp", "/private/tmp"},
		{"/tmp/x", "/private/tmp/x"},
		{"/var/folders/ab", "/private/var/folders/ab"},
		{"/etc/hosts", "/private/etc/hosts"},
		{"/tmpfoo", "/tmpfoo"},
		{"/private/tmp/x", "/private/tmp/x"},
		{"/Users/ann", "/Users/ann"},
	}
	for _, tc := range cases {
		got, err := PrivateAliases(tc.in)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	_, err := PrivateAliases("tmp")
	assert.Error(t, err)
}

func TestResolveExisting(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(real, link))
	realDir, err := filepath.EvalSymlinks(real)
	require.NoError(t, err)
	want := func(p string) string { w, _ := PrivateAliases(p); return w }

	got, err := ResolveExisting(link)
	require.NoError(t, err)
	assert.Equal(t, want(realDir), got)

	// A path that does not exist yet keeps its missing tail, under the resolved prefix.
	got, err = ResolveExisting(filepath.Join(link, "not", "yet"))
	require.NoError(t, err)
	assert.Equal(t, want(filepath.Join(realDir, "not", "yet")), got)

	_, err = ResolveExisting("relative")
	assert.Error(t, err)
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"/usr", `/a"b\c`, "/x)(allow default)(", "/日本", "\x00", "/a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Quote(s)
		if err != nil {
			return
		}
		// A quoted string parses back to exactly one string atom equal to the input.
		p := &sbplParser{src: q}
		n, perr := p.form()
		if perr != nil {
			t.Fatalf("Quote(%q) = %s does not parse: %v", s, q, perr)
		}
		if !n.isStr || n.atom != s || p.pos != len(q) {
			t.Fatalf("Quote(%q) = %s parses back as %q", s, q, n.atom)
		}
	})
}

// FuzzProfile: any path either is refused or yields a well-formed profile in which that path
// appears as a string literal of its own and no rule grants more than the spec asked for.
func FuzzProfile(f *testing.F) {
	for _, s := range []string{"/Users/ann/src", `/a"b`, `/a\b`, "/x) (allow default) (", "/tmp/x", "/", "", "/a/../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		s := &sandbox.Spec{Kind: sandbox.KindExec, Access: sandbox.Access{ReadOnly: []string{p}, Deny: []string{p + "/secret"}}}
		got, err := Profile(s, ProfileOptions{Resolve: PrivateAliases})
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalidSpec) {
				t.Fatalf("error %v does not wrap ErrInvalidSpec", err)
			}
			return
		}
		forms, perr := parseSBPL(got)
		if perr != nil {
			t.Fatalf("profile for %q does not parse: %v\n%s", p, perr, got)
		}
		rules := rulesOf(forms)
		for _, r := range rules {
			if r.action == "allow" && len(r.filters) == 0 {
				for _, o := range r.ops {
					if o == "default" || strings.HasPrefix(o, "file") {
						t.Fatalf("unfiltered %s in profile for %q", forms[r.index], p)
					}
				}
			}
		}
		clean := strings.TrimRight(p, "/")
		if act, _ := decide(rules, "file-read-data", clean+"/secret/key"); act != "deny" {
			t.Fatalf("deny of %q/secret not effective", clean)
		}
		if act, _ := decide(rules, "file-write-data", clean+"/f"); act != "deny" {
			t.Fatalf("read-only %q writable", clean)
		}
	})
}
