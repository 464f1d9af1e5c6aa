// SPDX-License-Identifier: MIT

package mcp

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocolhost/core"
)

// ociServerBinary builds testdata/ociserver as a static binary (no libc in the image).
func ociServerBinary(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ociserver")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/ociserver")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	bin, err := os.ReadFile(out)
	require.NoError(t, err)
	return bin
}

type layerFile struct {
	name, body, link string
	typ              byte
	mode             int64
}

func ociLayer(t *testing.T, files ...layerFile) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Linkname: f.link, Mode: f.mode, Size: int64(len(f.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write([]byte(f.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	require.NoError(t, err)
	return l
}

// probeImage is the test server on a base layer (with a file the next layer whites out),
// run by name through the image's PATH, in /app, as USER 1000.
func probeImage(t *testing.T, server []byte, marker string) v1.Image {
	t.Helper()
	base := ociLayer(t,
		layerFile{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		layerFile{name: "etc/image-marker", body: marker},
		layerFile{name: "etc/removed", body: "from the base layer"},
		layerFile{name: "app/", typ: tar.TypeDir, mode: 0o755},
		layerFile{name: "app/here", body: "in the working dir"},
		layerFile{name: "usr/local/bin/", typ: tar.TypeDir, mode: 0o755},
	)
	top := ociLayer(t,
		layerFile{name: "usr/local/bin/ociserver", body: string(server), mode: 0o4755},
		layerFile{name: "etc/.wh.removed"},
	)
	img, err := mutate.AppendLayers(empty.Image, base, top)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{"ociserver"}
	cf.Config.WorkingDir = "/app"
	cf.Config.User = "1000"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "IMAGE_VAR=from-the-image"}
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	return img
}

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	require.NoError(t, err)
	return d.String()
}

// An MCP server shipped as an image: served by go-containerregistry's registry on
// loopback, installed by tag and by digest and from a docker-save archive, run with the
// image as the root of its view, and pinned: a tag moved to another image changes nothing
// until an update, which asks.
func TestOCIImageServerInstalledPinnedAndConfined(t *testing.T) {
	fledge := buildFledge(t)
	server := ociServerBinary(t) // before the fixture narrows PATH
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	t.Setenv("LANG", "xx_HOST.UTF-8") // a plugin of the host gets it; an image plugin does not

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	repo := host + "/fledge/probe"
	push := func(img v1.Image) {
		ref, err := name.ParseReference(repo + ":v1")
		require.NoError(t, err)
		require.NoError(t, remote.Write(ref, img))
	}
	one := probeImage(t, server, "one")
	push(one)

	began := time.Now()
	out, errOut, err := c.run(f.project, "--ni", "plugins", "install", "oci:"+repo+":v1", "--yes")
	took := time.Since(began)
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	t.Logf("oci install by tag (11 MB static server, 2 layers, loopback registry, tools listed): %s", took)
	assert.Contains(t, out, "installed probe v1")
	assert.Contains(t, out, "plugin_probe_read")
	assert.Contains(t, errOut, "Pinned "+repo+":v1 to "+digestOf(t, one))
	assert.Contains(t, errOut, "1 setuid/setgid bits of the image were dropped")
	dir := filepath.Join(f.configDir, "plugins", "probe")
	st, err := os.Stat(filepath.Join(dir, "rootfs", "usr", "local", "bin", "ociserver"))
	require.NoError(t, err)
	assert.Zero(t, st.Mode()&os.ModeSetuid, "installed without the setuid bit")
	leftovers, _ := filepath.Glob(filepath.Join(f.configDir, "plugins", ".*"))
	assert.Empty(t, leftovers, "no staging or fetch dir stays behind")
	var sawDigest bool
	for _, r := range f.records(audit.EventInstall) {
		if r.Decision == audit.Allow && r.Details["digest"] == digestOf(t, one) {
			sawDigest = true
		}
	}
	assert.True(t, sawDigest, "the install record names the digest")

	call := func(tool string, args ...string) (string, error) {
		t.Helper()
		out, errOut, err := c.run(f.project, append([]string{"--project", f.project, "tools", "call", tool}, args...)...)
		return out + errOut, err
	}
	began = time.Now()
	got, err := call("plugin_probe_read", "path=/etc/image-marker")
	t.Logf("a tools call (the server started in its image view, one call, ended): %s", time.Since(began))
	require.NoError(t, err, got)
	assert.Contains(t, got, "one", "the image is the root of the server's view")
	got, _ = call("plugin_probe_read", "path=/etc/removed")
	assert.Contains(t, got, "no such file", "the whiteout removed the base layer's file")
	got, _ = call("plugin_probe_read", "path=/etc/passwd")
	assert.Contains(t, got, "no such file", "the host's /etc is not in the view")
	got, _ = call("plugin_probe_read", "path="+filepath.Join(f.home, ".ssh", "id_rsa"))
	assert.NotContains(t, got, "fledge-test-secret")
	got, err = call("plugin_probe_read", "path="+filepath.Join(f.project, "README.md"))
	require.NoError(t, err, got)
	assert.Contains(t, got, "hello from the project", "the project grant is bound into the view")
	got, _ = call("plugin_probe_write", "path=/app/planted", "text=x")
	assert.Contains(t, got, "read-only file system", "the image is read-only")
	assert.NoFileExists(t, filepath.Join(dir, "rootfs", "app", "planted"))
	got, _ = call("plugin_probe_write", "path="+filepath.Join(f.project, "planted"), "text=x")
	assert.NoFileExists(t, filepath.Join(f.project, "planted"), "the project is read-only at filesystem = project: %s", got)
	data := filepath.Join(f.configDir, "plugins", "probe", "data")
	got, err = call("plugin_probe_write", "path="+filepath.Join(data, "kept"), "text=state")
	require.NoError(t, err, got)
	assert.FileExists(t, filepath.Join(data, "kept"), "its data dir is its one writable place")
	got, err = call("plugin_probe_probe")
	require.NoError(t, err, got)
	assert.Contains(t, got, "cwd=/app\n", "the image's WORKDIR")
	assert.Contains(t, got, "IMAGE_VAR=from-the-image", "the image's ENV")
	assert.Contains(t, got, "FLEDGE_DATA_DIR="+core.Resolved(data))
	assert.NotContains(t, got, "FLEDGE_PLUGIN_DIR=", "its plugin dir is not in its view")
	assert.Contains(t, got, "HOME="+core.Resolved(data))
	assert.Contains(t, got, "uid="+strconv.Itoa(os.Getuid())+"\n", "USER 1000 runs as the user who runs fledge")
	assert.NotContains(t, got, "xx_HOST", "the host's environment (LANG here) is not the image's")
	for _, hostOnly := range []string{"boot", "var", "sbin", "lib"} {
		if _, err := os.Stat("/" + hostOnly); err == nil {
			assert.NotRegexp(t, `root=(.*,)?`+hostOnly+`(,|\n)`, got, "the host's /%s is not in the view", hostOnly)
		}
	}

	// Through `fledge serve --mcp` and the official Go SDK's client.
	cl := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil)
	cmd := exec.Command(fledge, "--project", f.project, "serve", "--mcp")
	cmd.Env = c.env()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess, err := cl.Connect(ctx, &mcpsdk.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	res, err := sess.CallTool(ctx, &mcpsdk.CallToolParams{Name: "plugin_probe_read", Arguments: map[string]any{"path": "/app/here"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	assert.Equal(t, "in the working dir", res.Content[0].(*mcpsdk.TextContent).Text)
	require.NoError(t, sess.Close())

	// By digest: the same image under another name.
	out, errOut, err = c.run(f.project, "--ni", "plugins", "install", "oci:"+repo+"@"+digestOf(t, one), "--name", "probe-pinned", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	assert.Contains(t, out, "installed probe-pinned sha256:")

	// The tag moves to another image: the installed plugin still runs what it was pinned to.
	two := probeImage(t, server, "two")
	push(two)
	require.NotEqual(t, digestOf(t, one), digestOf(t, two))
	got, err = call("plugin_probe_read", "path=/etc/image-marker")
	require.NoError(t, err, got)
	assert.Contains(t, got, "one", "a start runs the pinned digest, not what the tag names now")
	out, errOut, err = c.run(f.project, "--ni", "plugins", "update", "probe")
	require.Error(t, err, "an update to another digest is asked about: %s %s", out, errOut)
	assert.Contains(t, errOut, "digest: "+digestOf(t, two)+" (was "+digestOf(t, one)+")")
	got, _ = call("plugin_probe_read", "path=/etc/image-marker")
	assert.Contains(t, got, "one", "the refused update changed nothing")
	out, errOut, err = c.run(f.project, "--ni", "plugins", "update", "probe", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	got, err = call("plugin_probe_read", "path=/etc/image-marker")
	require.NoError(t, err, got)
	assert.Contains(t, got, "two", "the update re-resolved the tag and re-pinned")
	assert.FileExists(t, filepath.Join(data, "kept"), "its data stays")
	out, _, err = c.run(f.project, "plugins", "info", "probe")
	require.NoError(t, err)
	assert.Contains(t, out, "digest:    "+digestOf(t, two))
	assert.Contains(t, out, "source:    oci:"+repo+":v1")

	// From a docker-save archive.
	archive := filepath.Join(f.base, "probe.tar")
	tag, err := name.NewTag("example.com/probe:v9")
	require.NoError(t, err)
	require.NoError(t, tarball.WriteToFile(archive, tag, one))
	out, errOut, err = c.run(f.project, "--ni", "plugins", "install", "oci-archive:"+archive, "--name", "probe-archive", "--filesystem", "none", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	got, err = call("plugin_probe-archive_read", "path=/etc/image-marker")
	require.NoError(t, err, got)
	assert.Contains(t, got, "one")
	got, _ = call("plugin_probe-archive_read", "path="+filepath.Join(f.project, "README.md"))
	assert.NotContains(t, got, "hello from the project", "filesystem = none: no project in the view")

	// A hostile image through the CLI: a file through an absolute symlink out of the image.
	outside := filepath.Join(f.base, "outside")
	require.NoError(t, os.Mkdir(outside, 0o755))
	hostile, err := mutate.AppendLayers(one, ociLayer(t,
		layerFile{name: "evil", typ: tar.TypeSymlink, link: outside},
		layerFile{name: "evil/planted", body: "x"}))
	require.NoError(t, err)
	href, err := name.ParseReference(host + "/fledge/hostile:1")
	require.NoError(t, err)
	require.NoError(t, remote.Write(href, hostile))
	out, errOut, err = c.run(f.project, "--ni", "plugins", "install", "oci:"+host+"/fledge/hostile:1", "--yes")
	require.Error(t, err, "stdout: %s", out)
	assert.Contains(t, errOut, "unsafe image layer: layer 3: evil/planted: it is reached through a symlink that leads out of the image root")
	ents, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing is written outside the plugin dir")
	assert.NoDirExists(t, filepath.Join(f.configDir, "plugins", "hostile"))
	leftovers, _ = filepath.Glob(filepath.Join(f.configDir, "plugins", ".*"))
	assert.Empty(t, leftovers, "no staging or fetch dir stays behind")
	var refused bool
	for _, r := range f.records(audit.EventInstall) {
		if r.Decision == audit.Deny && strings.Contains(r.Details["error"].(string), "unsafe image layer") {
			refused = true
		}
	}
	assert.True(t, refused, "the refused install is on record")

	// fledge.lock pins the image plugins by their manifest digest; sync on a config that
	// lacks them installs exactly those digests, whatever the tag names by then.
	out, errOut, err = c.run(f.project, "--project", f.project, "plugins", "lock")
	require.NoError(t, err, "lock: %s %s", out, errOut)
	lock, err := os.ReadFile(filepath.Join(f.project, "fledge.lock"))
	require.NoError(t, err)
	assert.Contains(t, string(lock), digestOf(t, two))
	push(probeImage(t, server, "three"))
	for _, n := range []string{"probe", "probe-pinned"} {
		_, errOut, err = c.run(f.project, "plugins", "remove", n)
		require.NoError(t, err, errOut)
	}
	out, errOut, err = c.run(f.project, "--ni", "--project", f.project, "plugins", "sync")
	require.NoError(t, err, "sync: %s %s", out, errOut)
	got, err = call("plugin_probe_read", "path=/etc/image-marker")
	require.NoError(t, err, got)
	assert.Contains(t, got, "two", "sync installs the locked digest, not what the tag names now")
	out, _, err = c.run(f.project, "plugins", "info", "probe")
	require.NoError(t, err)
	assert.Contains(t, out, "digest:    "+digestOf(t, two))

	// remove takes the image with it.
	_, errOut, err = c.run(f.project, "plugins", "remove", "probe-archive")
	require.NoError(t, err, errOut)
	assert.NoDirExists(t, filepath.Join(f.configDir, "plugins", "probe-archive"))
}
