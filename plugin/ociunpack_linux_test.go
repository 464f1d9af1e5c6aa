// SPDX-License-Identifier: MIT

package plugin

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
)

// tarEntry is one entry of a test layer.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layerFromEntries(t *testing.T, ents ...tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeChar {
			h.Devmajor, h.Devminor = 8, 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return layerFromBytes(t, buf.Bytes())
}

func layerFromBytes(t *testing.T, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	require.NoError(t, err)
	return l
}

// testImage is an image of these layers for this machine's platform, running argv.
func testImage(t *testing.T, argv []string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = argv
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	return img
}

// loopbackRegistry serves go-containerregistry's registry on 127.0.0.1 (plain HTTP, as a
// loopback registry may be) and returns its host:port.
func loopbackRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func pushImage(t *testing.T, host, repo string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(host + "/" + repo)
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))
	return host + "/" + repo
}

// installImage fetches ref from the registry and unpacks it into a fresh dir; it returns
// the package, the rootfs path and the unpack error.
func installImage(t *testing.T, ref string, b ImageBounds) (*OCIPackage, string, error) {
	t.Helper()
	dir := t.TempDir()
	fetch := filepath.Join(dir, "fetch")
	require.NoError(t, os.Mkdir(fetch, 0o755))
	pk, err := FetchOCI(context.Background(), OCIOptions{Request: OCIRequest{Ref: ref}, Dir: fetch, Bounds: b})
	if err != nil {
		return nil, "", err
	}
	root := filepath.Join(dir, "stage", ImageRootDir)
	require.NoError(t, os.Mkdir(filepath.Dir(root), 0o755))
	return pk, root, pk.Unpack(context.Background(), root)
}

func TestOCIUnpackAppliesWhiteoutsAndPinsTheDigest(t *testing.T) {
	host := loopbackRegistry(t)
	base := layerFromEntries(t,
		tarEntry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "etc/secret", body: "lower"},
		tarEntry{name: "opq/a", body: "a"},
		tarEntry{name: "usr/lib/libx.so", body: "lib"},
		tarEntry{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
	)
	top := layerFromEntries(t,
		tarEntry{name: "etc/.wh.secret", body: ""},
		tarEntry{name: "opq/.wh..wh..opq", body: ""},
		tarEntry{name: "opq/b", body: "b"},
		tarEntry{name: "lib/liby.so", body: "through a relative link"},
		tarEntry{name: "bin/hard", typ: tar.TypeLink, link: "usr/lib/libx.so"},
	)
	img := testImage(t, []string{"/server"}, base, top)
	want, err := img.Digest()
	require.NoError(t, err)
	ref := pushImage(t, host, "test/server:v1", img)

	pk, root, err := installImage(t, ref, DefaultImageBounds)
	require.NoError(t, err)
	require.Equal(t, want.String(), pk.Digest, "the tag is pinned to the digest it named")
	require.Equal(t, "v1", pk.Version)
	require.Equal(t, host+"/test/server@"+want.String(), pk.Pinned)
	require.Equal(t, []string{"/server"}, pk.Manifest.Image.Argv)
	require.NoFileExists(t, filepath.Join(root, "etc/secret"), "a whiteout removes the lower layer's file")
	require.DirExists(t, filepath.Join(root, "etc"))
	names, err := os.ReadDir(filepath.Join(root, "opq"))
	require.NoError(t, err)
	require.Len(t, names, 1, "an opaque whiteout empties the directory of lower layers' entries")
	require.Equal(t, "b", names[0].Name())
	body, err := os.ReadFile(filepath.Join(root, "usr/lib/liby.so"))
	require.NoError(t, err)
	require.Equal(t, "through a relative link", string(body))
	a, err := os.Stat(filepath.Join(root, "bin/hard"))
	require.NoError(t, err)
	b, err := os.Stat(filepath.Join(root, "usr/lib/libx.so"))
	require.NoError(t, err)
	require.True(t, os.SameFile(a, b), "a hard link within the image is kept")

	// By digest: the same image.
	pk2, _, err := installImage(t, host+"/test/server@"+want.String(), DefaultImageBounds)
	require.NoError(t, err)
	require.Equal(t, want.String(), pk2.Digest)
	require.Equal(t, "", pk2.Version)

	// A lock's digest (OCIOptions.Digest): the image is fetched by it, whatever the tag
	// names now; a digest the registry does not have is refused.
	other := testImage(t, []string{"/other"}, base)
	pushImage(t, host, "test/server:v1", other)
	fetch := filepath.Join(t.TempDir(), "fetch")
	require.NoError(t, os.Mkdir(fetch, 0o755))
	pk3, err := FetchOCI(context.Background(), OCIOptions{Request: OCIRequest{Ref: ref}, Dir: fetch, Digest: want.String()})
	require.NoError(t, err)
	pk3.Close()
	require.Equal(t, want.String(), pk3.Digest, "the lock's digest, not what the tag names now")
	require.Equal(t, "v1", pk3.Version)
	_, err = FetchOCI(context.Background(), OCIOptions{Request: OCIRequest{Ref: ref}, Dir: fetch, Digest: "sha256:" + strings.Repeat("0", 64)})
	require.ErrorIs(t, err, ErrOCIFetch, "a digest the registry does not have")
}

// outsideOf is a directory next to nothing of the test's install (where an escaping entry
// would land), checked empty after each refusal.
func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing is written outside the image root")
}

func TestOCIUnpackRefusesHostileLayers(t *testing.T) {
	host := loopbackRegistry(t)
	outside := t.TempDir()
	cases := []struct {
		name string
		ents []tarEntry
		want string
	}{
		{"dotdot path", []tarEntry{{name: "../../../../../../" + strings.TrimPrefix(outside, "/") + "/escaped", body: "x"}}, "climbs out"},
		{"absolute symlink then a file through it", []tarEntry{
			{name: "evil", typ: tar.TypeSymlink, link: outside},
			{name: "evil/escaped", body: "x"},
		}, "symlink"},
		{"relative symlink climbing out", []tarEntry{
			{name: "a/up", typ: tar.TypeSymlink, link: "../../../../../../../../" + strings.TrimPrefix(outside, "/")},
			{name: "a/up/escaped", body: "x"},
		}, "symlink"},
		{"device node", []tarEntry{{name: "dev/sda", typ: tar.TypeChar}}, "device node"},
		{"fifo", []tarEntry{{name: "tmp/pipe", typ: tar.TypeFifo}}, "FIFO"},
		{"hard link out", []tarEntry{{name: "ln", typ: tar.TypeLink, link: "../../../../etc/passwd"}}, "hard link"},
		{"hard link through an absolute symlink", []tarEntry{
			{name: "evil", typ: tar.TypeSymlink, link: "/etc"},
			{name: "ln", typ: tar.TypeLink, link: "evil/passwd"},
		}, "hard link"},
		{"whiteout through an absolute symlink", []tarEntry{
			{name: "evil", typ: tar.TypeSymlink, link: outside},
			{name: "evil/.wh.keep", body: ""},
		}, "symlink"},
	}
	// The whiteout case would remove this file through the link.
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "whiteout through an absolute symlink" {
				require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), nil, 0o644))
				defer os.Remove(filepath.Join(outside, "keep"))
			}
			img := testImage(t, []string{"/server"}, layerFromEntries(t, c.ents...))
			ref := pushImage(t, host, "hostile/"+strings.ReplaceAll(c.name, " ", "-")+":latest", img)
			_ = i
			_, root, err := installImage(t, ref, DefaultImageBounds)
			require.ErrorIs(t, err, ErrUnsafeImage)
			require.Contains(t, err.Error(), c.want)
			require.Contains(t, err.Error(), "nothing was installed")
			if c.name == "whiteout through an absolute symlink" {
				require.FileExists(t, filepath.Join(outside, "keep"))
				return
			}
			requireEmptyDir(t, outside)
			require.NoFileExists(t, "/etc/escaped")
			require.DirExists(t, root)
		})
	}
}

func TestOCIUnpackDropsSetuidBits(t *testing.T) {
	host := loopbackRegistry(t)
	img := testImage(t, []string{"/bin/su"}, layerFromEntries(t,
		tarEntry{name: "bin/su", body: "#!/bin/sh\n", mode: 0o4755},
		tarEntry{name: "bin/sg", body: "#!/bin/sh\n", mode: 0o2755},
	))
	pk, root, err := installImage(t, pushImage(t, host, "setuid/img:1", img), DefaultImageBounds)
	require.NoError(t, err, "a setuid binary is installed, without the bit")
	require.Equal(t, 2, pk.SetIDDropped)
	for _, f := range []string{"bin/su", "bin/sg"} {
		st, err := os.Stat(filepath.Join(root, f))
		require.NoError(t, err)
		require.Zero(t, st.Mode()&(os.ModeSetuid|os.ModeSetgid), f)
		require.Equal(t, os.FileMode(0o755), st.Mode().Perm(), f)
	}
}

func TestOCIUnpackRefusesASparseFileOverTheSizeBound(t *testing.T) {
	gnutar, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("GNU tar is needed to write a sparse file into a layer")
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(10<<30)) // 10 GiB, all hole
	require.NoError(t, f.Close())
	layerTar := filepath.Join(dir, "layer.tar")
	out, err := exec.Command(gnutar, "--sparse", "-C", dir, "-cf", layerTar, "big").CombinedOutput()
	require.NoError(t, err, string(out))
	b, err := os.ReadFile(layerTar)
	require.NoError(t, err)
	require.Less(t, len(b), 1<<20, "the layer itself is small")
	require.NoError(t, os.Remove(big))

	host := loopbackRegistry(t)
	img := testImage(t, []string{"/server"}, layerFromBytes(t, b))
	_, root, err := installImage(t, pushImage(t, host, "sparse/img:1", img), DefaultImageBounds)
	require.ErrorIs(t, err, ErrImageTooLarge)
	require.Contains(t, err.Error(), "10.0 GiB")
	require.NoFileExists(t, filepath.Join(root, "big"), "nothing of it is written")
}

func TestOCIUnpackRefusesMoreFilesThanTheBound(t *testing.T) {
	host := loopbackRegistry(t)
	var ents []tarEntry
	for i := 0; i < 20; i++ {
		ents = append(ents, tarEntry{name: "f/" + strings.Repeat("x", i+1), body: "x"})
	}
	img := testImage(t, []string{"/server"}, layerFromEntries(t, ents...))
	_, _, err := installImage(t, pushImage(t, host, "many/img:1", img), ImageBounds{Bytes: 1 << 20, Files: 10})
	require.ErrorIs(t, err, ErrImageTooLarge)
	require.Contains(t, err.Error(), "more than 10 files")
}

func TestOCIFetchRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	// 10.0.0.1 is private: go-containerregistry would fall back to plain HTTP for it; fledge
	// never sends a registry request without TLS beyond this machine.
	_, err := ociTransport{base: nil}.RoundTrip(httptest.NewRequest("GET", "http://10.0.0.1:5000/v2/", nil))
	require.Error(t, err)
	require.Contains(t, err.Error(), "plain HTTP")
	require.True(t, loopbackHost("127.0.0.1") && loopbackHost("localhost") && loopbackHost("::1"))
	require.False(t, loopbackHost("10.0.0.1"))
}

func TestOCIFetchArchive(t *testing.T) {
	img := testImage(t, []string{"/server", "--stdio"}, layerFromEntries(t, tarEntry{name: "server", body: "x", mode: 0o755}))
	want, err := img.Digest()
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "server.tar")
	tag, err := name.NewTag("example.com/server:1")
	require.NoError(t, err)
	require.NoError(t, tarball.WriteToFile(path, tag, img))
	fetch := filepath.Join(dir, "fetch")
	require.NoError(t, os.Mkdir(fetch, 0o755))
	pk, err := FetchOCI(context.Background(), OCIOptions{Request: OCIRequest{Ref: path, Archive: true}, Dir: fetch})
	require.NoError(t, err)
	require.Equal(t, "server", pk.Name)
	require.Equal(t, want.String(), pk.Digest)
	require.NoError(t, pk.Unpack(context.Background(), filepath.Join(dir, "rootfs")))
	require.FileExists(t, filepath.Join(dir, "rootfs", "server"))
	m, _, err := LoadManifest(fetch)
	require.NoError(t, err)
	require.True(t, m.IsImage())
	require.Equal(t, []string{"/server", "--stdio"}, m.Image.Argv)

	_, err = FetchOCI(context.Background(), OCIOptions{Request: OCIRequest{Ref: filepath.Join(dir, "none.tar"), Archive: true}, Dir: fetch})
	require.True(t, errors.Is(err, ErrOCIFetch), "%v", err)
}

// tarDir writes the tree at dir into a tar file (an OCI layout as `tar -C dir -cf`).
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	require.NoError(t, err)
	tw := tar.NewWriter(f)
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		require.NoError(t, err)
		h.Name = filepath.ToSlash(rel)
		require.NoError(t, tw.WriteHeader(h))
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			_, err = tw.Write(b)
			require.NoError(t, err)
		}
		return nil
	}))
	require.NoError(t, tw.Close())
	require.NoError(t, f.Close())
}

func TestOCIFetchArchiveOCILayout(t *testing.T) {
	img := testImage(t, []string{"/server"}, layerFromEntries(t, tarEntry{name: "server", body: "x", mode: 0o755}))
	want, err := img.Digest()
	require.NoError(t, err)
	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	require.NoError(t, err)
	require.NoError(t, lp.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})))
	archive := filepath.Join(dir, "server.tar")
	tarDir(t, filepath.Join(dir, "layout"), archive)

	fetch := filepath.Join(dir, "fetch")
	require.NoError(t, os.Mkdir(fetch, 0o755))
	pk, err := FetchOCI(context.Background(), OCIOptions{Request: OCIRequest{Ref: archive, Archive: true}, Dir: fetch})
	require.NoError(t, err)
	require.Equal(t, want.String(), pk.Digest)
	require.NoError(t, pk.Unpack(context.Background(), filepath.Join(dir, "rootfs")))
	require.FileExists(t, filepath.Join(dir, "rootfs", "server"))
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "fledge-oci-layout-*"))
	require.Empty(t, left, "the unpacked layout is removed")

	// A layout tar with a symlink (a blob that would be read from elsewhere) is refused.
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "layout", "blobs", "link")))
	tarDir(t, filepath.Join(dir, "layout"), archive)
	_, err = FetchOCI(context.Background(), OCIOptions{Request: OCIRequest{Ref: archive, Archive: true}, Dir: fetch})
	require.ErrorIs(t, err, ErrUnsafeImage)
}

// swapBlob serves the registry, handing out other bytes for the blob named by digest (a
// valid layer of its own: only the digests tell them apart).
type swapBlob struct {
	next   http.Handler
	digest string
	body   []byte
}

func (f swapBlob) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+f.digest) {
		f.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.(http.Flusher).Flush() // chunked: no length to give it away before its bytes do
	_, _ = w.Write(f.body)
}

func TestOCIUnpackRefusesATamperedBlob(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	layer := layerFromEntries(t, tarEntry{name: "server", body: "the real server", mode: 0o755})
	d, err := layer.Digest()
	require.NoError(t, err)
	size, err := layer.Size()
	require.NoError(t, err)
	// Another layer of the same compressed size: only the digest tells them apart.
	var body []byte
	for i := 0; i < 5000 && int64(len(body)) != size; i++ {
		evil := layerFromEntries(t, tarEntry{name: "server", body: fmt.Sprintf("planted %d", i), mode: 0o755})
		rc, err := evil.Compressed()
		require.NoError(t, err)
		body, err = io.ReadAll(rc)
		require.NoError(t, err)
	}
	require.Equal(t, size, int64(len(body)))
	srv := httptest.NewServer(swapBlob{next: reg, digest: d.String(), body: body})
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := testImage(t, []string{"/server"}, layer)
	ref, err := name.ParseReference(host + "/tampered/img:1")
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))

	_, _, err = installImage(t, host+"/tampered/img:1", DefaultImageBounds)
	require.Error(t, err, "a blob that is not the bytes its digest names is refused")
	require.True(t, errors.Is(err, ErrOCIImage) || errors.Is(err, ErrOCIFetch), "%v", err)
	require.Contains(t, err.Error(), "error verifying sha256 checksum")
	require.Contains(t, err.Error(), "nothing was installed")
}
