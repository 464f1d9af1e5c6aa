// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/fledgehq/fledge/policy"
)

// SourceOCIArchive is an image in a file: `docker save` output (or any tarball
// go-containerregistry writes), installed as oci-archive:/abs/path.tar.
const SourceOCIArchive = "oci-archive:"

// ImageRootDir is where an image plugin's filesystem is unpacked inside its plugin dir;
// ImageConfigFile the image's config blob kept next to it (its command's "binary").
const (
	ImageRootDir    = "rootfs"
	ImageConfigFile = "image.json"
)

// DefaultOCITimeout bounds one pull.
const DefaultOCITimeout = 10 * time.Minute

// ImageBounds bound what an image may unpack to: its bytes (every regular file at its
// full size, a sparse one included) and its entries.
type ImageBounds struct {
	Bytes int64
	Files int64
}

// DefaultImageBounds: generous for a server image (a Python or Node runtime with its
// packages), small enough that an image cannot fill the disk.
var DefaultImageBounds = ImageBounds{Bytes: 4 << 30, Files: 250_000}

var (
	// ErrOCIFetch: the image could not be fetched (registry unreachable, no such image or
	// tag, refused credentials, plain HTTP to a registry not on this machine).
	ErrOCIFetch = errors.New("the image could not be fetched")
	// ErrOCIImage: the image cannot be run as a plugin (another OS or architecture, no
	// entrypoint, a blob whose digest does not match, a broken layer).
	ErrOCIImage = errors.New("the image cannot be installed as an MCP server")
	// ErrUnsafeImage: a layer holds what fledge does not unpack (UnsafeImageError).
	ErrUnsafeImage = errors.New("unsafe image layer")
	// ErrImageTooLarge: the image is over its bounds (ImageBounds).
	ErrImageTooLarge = errors.New("image too large")
)

// UnsafeImageError says which entry of which layer was refused, and why.
type UnsafeImageError struct {
	Layer int
	Path  string
	Why   string
}

func (e *UnsafeImageError) Error() string {
	return fmt.Sprintf("%v: layer %d: %s: %s; nothing was installed", ErrUnsafeImage, e.Layer, clip.Bytes(e.Path, 80), e.Why)
}

func (e *UnsafeImageError) Is(target error) bool { return target == ErrUnsafeImage }

// OCIRequest is how an image plugin was asked for; once installed it is part of its entry
// in plugins.toml (Entry.OCI), with the digest it was pinned to.
type OCIRequest struct {
	// Ref is the image reference (registry/repository:tag or @sha256:...), or for an
	// archive the absolute path of the file.
	Ref     string `json:"ref" toml:"ref"`
	Archive bool   `json:"archive,omitempty" toml:"archive,omitempty"`
	// Args replace the image's CMD (as after `docker run IMAGE`); Env adds to its ENV.
	Args       []string `json:"args,omitempty" toml:"args,omitempty"`
	Env        []string `json:"env,omitempty" toml:"env,omitempty"`
	Name       string   `json:"name,omitempty" toml:"name,omitempty"`
	Filesystem string   `json:"filesystem,omitempty" toml:"filesystem,omitempty"`
	Network    bool     `json:"network,omitempty" toml:"network,omitempty"`
	Secrets    []string `json:"secrets,omitempty" toml:"secrets,omitempty"`
}

// OCIRecord is an installed image plugin's record: the request and the manifest digest it
// was pinned to (what every start runs, and what an update compares with).
type OCIRecord struct {
	OCIRequest
	Digest string `json:"digest" toml:"digest"`
}

// Source is the request as a package source (oci:REF, oci-archive:PATH).
func (r *OCIRequest) Source() string {
	if r.Archive {
		return SourceOCIArchive + r.Ref
	}
	return SourceOCI + r.Ref
}

// npm is the request in the shape of an npm one: the checks and the capabilities the
// written manifest declares are the same.
func (r *OCIRequest) npm() NPMRequest {
	return NPMRequest{Package: "x", Args: r.Args, Env: r.Env, Name: r.Name, Filesystem: r.Filesystem,
		Network: r.Network, Secrets: r.Secrets}
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
var digestRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`) })

// Check validates a request before anything is fetched.
func (r *OCIRequest) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadSource}, a...)...)
	}
	if r.Archive {
		if !filepath.IsAbs(r.Ref) || badText(r.Ref) {
			return bad("oci-archive:%s: give the absolute path of a docker save (or OCI) tar file", clip.Bytes(r.Ref, 80))
		}
	} else if _, err := name.ParseReference(r.Ref, name.StrictValidation); err != nil && !defaultRegistryRef(r.Ref) {
		return bad("oci:%s is not an image reference (registry/repository:tag or @sha256:...): %v", clip.Bytes(r.Ref, 80), err)
	}
	n := r.npm()
	return n.Check()
}

// defaultRegistryRef: a reference without a registry (Docker Hub), which strict validation
// refuses and the weak one takes.
func defaultRegistryRef(ref string) bool {
	_, err := name.ParseReference(ref)
	return err == nil
}

// DecideBeforeOCIFetch is DecideBeforeFetch for an image.
func DecideBeforeOCIFetch(o InstallOptions, r OCIRequest) error {
	return DecideBeforeFetch(o, r.npm())
}

// OCIOptions run one fetch.
type OCIOptions struct {
	Request OCIRequest
	// Dir is an empty dir where plugin.toml and image.json are written (Install copies it;
	// the layers are unpacked by OCIPackage.Unpack into the staged copy).
	Dir     string
	Timeout time.Duration
	// Keychain gives the registry credentials (default authn.DefaultKeychain: the user's
	// ~/.docker/config.json and its helpers), read by fledge, never by the plugin.
	Keychain authn.Keychain
	Bounds   ImageBounds
	// Digest, when set, is the manifest digest the image must be (a lock file's): the
	// reference is fetched by it, and anything else is ErrDigestMismatch.
	Digest string
}

// OCIPackage is a resolved, pinned image whose manifest and config were checked.
type OCIPackage struct {
	Request OCIRequest
	Name    string
	// Version is the tag asked for ("" for a digest or an archive); Digest the manifest
	// digest the plugin is pinned to (sha256:...).
	Version, Digest string
	// Pinned is the reference by digest (registry/repository@sha256:...; the archive's
	// path for an archive).
	Pinned   string
	Manifest *Manifest
	Layers   int
	// Size is the layers' size as the manifest gives it (compressed).
	Size   int64
	img    v1.Image
	diffs  []v1.Hash
	bounds ImageBounds
	cancel context.CancelFunc
	// SetIDDropped counts the setuid/setgid bits Unpack dropped.
	SetIDDropped int
}

// ociTransport carries fledge's registry requests: plain HTTP only to this machine (a
// loopback registry, as docker allows localhost), every other request HTTPS with the
// host's trust store; a redirect (to a blob store) is checked again.
type ociTransport struct{ base http.RoundTripper }

func (t ociTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !loopbackHost(req.URL.Hostname()) {
		return nil, fmt.Errorf("plain HTTP to %s refused: only a registry on this machine (loopback) may be reached without TLS", req.URL.Host)
	}
	return t.base.RoundTrip(req)
}

// FetchOCI resolves the image (a tag to the digest it names now), checks its manifest and
// config against their digests, and writes the plugin tree around it: plugin.toml
// (protocol = "mcp", runtime = "oci", the [image] it runs: digest, argv, environment,
// working dir, user) and image.json (the config blob). No layer is fetched yet: Unpack
// does that, into the staged copy, once the grants were decided.
func FetchOCI(ctx context.Context, o OCIOptions) (*OCIPackage, error) {
	r := o.Request
	if err := r.Check(); err != nil {
		return nil, err
	}
	if r.Filesystem == "" {
		r.Filesystem = policy.FilesystemProject
	}
	b := o.Bounds
	if b.Bytes <= 0 || b.Files <= 0 {
		b = DefaultImageBounds
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultOCITimeout
	}
	// One deadline for the whole pull: the layers are fetched later, by Unpack (which
	// ends it), through the same context.
	cctx, cancel := context.WithTimeout(ctx, timeout)
	pk := &OCIPackage{Request: r, bounds: b, cancel: cancel}
	ok := false
	defer func() {
		if !ok {
			pk.Close()
		}
	}()
	var img v1.Image
	var err error
	if r.Archive {
		var cleanup func()
		if img, cleanup, err = archiveImage(r.Ref, b); err != nil {
			return nil, err
		}
		pk.cancel = func() { cancel(); cleanup() }
		pk.Pinned = r.Ref
	} else {
		if img, err = pk.resolve(cctx, o); err != nil {
			return nil, err
		}
	}
	raw, cfg, err := pk.checkImage(img, o.Digest)
	if err != nil {
		return nil, err
	}

	argv := append([]string{}, cfg.Config.Entrypoint...)
	if len(r.Args) > 0 {
		argv = append(argv, r.Args...)
	} else {
		argv = append(argv, cfg.Config.Cmd...)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%w: it has no ENTRYPOINT or CMD to run (give the command after --)", ErrOCIImage)
	}
	workdir := cfg.Config.WorkingDir
	if workdir == "" {
		workdir = "/"
	}
	workdir = path.Clean(workdir)
	im := &ImageConfig{Ref: r.Ref, Digest: pk.Digest, Argv: argv, Env: append(append([]string{}, cfg.Config.Env...), r.Env...),
		WorkDir: workdir, User: cfg.Config.User}
	if r.Archive {
		im.Ref = SourceOCIArchive + r.Ref
	}
	if err := im.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOCIImage, err)
	}

	pk.Name = r.Name
	if pk.Name == "" {
		pk.Name = imagePluginName(r)
	}
	if !ValidName(pk.Name) {
		return nil, fmt.Errorf("%w: no plugin name can be made from %q; pass --name", ErrBadSource, clip.Bytes(r.Ref, 80))
	}
	if err := pk.writeTree(o.Dir, r, im, raw); err != nil {
		return nil, err
	}
	pk.Request = r
	ok = true
	return pk, nil
}

// checkImage checks a resolved image before anything of it is kept: its manifest digest is
// the one asked for (if any), its config blob matches the manifest, it is for this machine,
// its layers and diff IDs agree, and their size is within the bound. It returns the raw
// config blob and the config.
func (pk *OCIPackage) checkImage(img v1.Image, want string) ([]byte, *v1.ConfigFile, error) {
	r, b := pk.Request, pk.bounds
	d, err := img.Digest()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: manifest: %v", ErrOCIImage, err)
	}
	pk.Digest = d.String()
	if want != "" && want != pk.Digest {
		return nil, nil, fmt.Errorf("%w: %s is %s, and %s was asked for; nothing was installed", ErrDigestMismatch, clip.Bytes(r.Ref, 80), pk.Digest, clip.Bytes(want, 80))
	}
	if r.Archive {
		pk.Version = ""
	}
	man, err := img.Manifest()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: manifest: %v", ErrOCIImage, err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: config: %v", ErrOCIImage, err)
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != man.Config.Digest.String() {
		return nil, nil, fmt.Errorf("%w: its config blob does not match the digest its manifest gives (%s)", ErrOCIImage, man.Config.Digest)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: config: %v", ErrOCIImage, err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		return nil, nil, fmt.Errorf("%w: it is built for %s/%s, and this machine runs linux/%s", ErrOCIImage, clip.Bytes(cfg.OS, 80), clip.Bytes(cfg.Architecture, 80), runtime.GOARCH)
	}
	if len(man.Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, nil, fmt.Errorf("%w: %d layers in the manifest, %d in the config", ErrOCIImage, len(man.Layers), len(cfg.RootFS.DiffIDs))
	}
	pk.Layers, pk.diffs = len(man.Layers), cfg.RootFS.DiffIDs
	for _, l := range man.Layers {
		pk.Size += l.Size
	}
	if pk.Size > b.Bytes {
		return nil, nil, fmt.Errorf("%w: its layers are %s, more than the %s an image may take", ErrImageTooLarge, humanBytes(pk.Size), humanBytes(b.Bytes))
	}
	pk.img = img
	return raw, cfg, nil
}

// writeTree writes the plugin tree around the image: plugin.toml (protocol = "mcp",
// runtime = "oci", the [image] it runs) and image.json (the config blob), and keeps the
// parsed manifest.
func (pk *OCIPackage) writeTree(dir string, r OCIRequest, im *ImageConfig, raw []byte) error {
	version := pk.Version
	if version == "" {
		version = pk.Digest[:19] // sha256: and 12 hex digits
	}
	n := r.npm()
	m := struct {
		Plugin       Meta         `toml:"plugin"`
		Commands     []Command    `toml:"commands"`
		Capabilities Capabilities `toml:"capabilities"`
		Image        *ImageConfig `toml:"image"`
	}{
		Plugin: Meta{Name: pk.Name, Version: version, Description: clip.Bytes("the MCP server of image "+im.Ref, 200),
			Protocol: ProtocolMCP, Runtime: RuntimeOCI},
		Commands: []Command{{Name: pk.Name, Binary: ImageConfigFile,
			Description: clip.Bytes("the MCP server of image "+im.Ref, 200)}},
		Capabilities: n.capabilities(),
		Image:        im,
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Written by fledge for image %s, pinned to %s.\n", im.Ref, pk.Digest)
	if err := toml.NewEncoder(&buf).Encode(m); err != nil {
		return err
	}
	pm, _, err := ParseManifest(buf.Bytes())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrOCIImage, err)
	}
	pk.Manifest = pm
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ImageConfigFile), raw, 0o644); err != nil {
		return err
	}
	return nil
}

// resolve asks the registry what the reference names now and pins it: the manifest by
// its digest (the platform's, from an index), fetched and checked against that digest.
func (pk *OCIPackage) resolve(ctx context.Context, o OCIOptions) (v1.Image, error) {
	r := pk.Request
	var opts []name.Option
	ref0, err := name.ParseReference(r.Ref)
	if err != nil {
		return nil, fmt.Errorf("%w: oci:%s: %v", ErrBadSource, clip.Bytes(r.Ref, 80), err)
	}
	if loopbackHost(hostOnly(ref0.Context().RegistryStr())) {
		opts = append(opts, name.Insecure) // plain HTTP allowed; the transport checks again
	}
	ref, err := name.ParseReference(r.Ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: oci:%s: %v", ErrBadSource, clip.Bytes(r.Ref, 80), err)
	}
	kc := o.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc),
		remote.WithTransport(ociTransport{base: remote.DefaultTransport}),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})}
	if o.Digest != "" {
		if !digestRe().MatchString(o.Digest) {
			return nil, fmt.Errorf("%w: digest %q is not sha256:<64 hex digits>", ErrBadSource, clip.Bytes(o.Digest, 80))
		}
		// Asked for by digest: that is what is fetched (and checked), whatever a tag says now.
		if t, ok := ref.(name.Tag); ok {
			pk.Version = t.TagStr()
		}
		ref = ref.Context().Digest(o.Digest)
	}
	desc, err := remote.Get(ref, ropts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrOCIFetch, clip.Bytes(r.Ref, 80), clip.Bytes(err.Error(), 600))
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrOCIImage, clip.Bytes(r.Ref, 80), err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrOCIImage, clip.Bytes(r.Ref, 80), err)
	}
	pinned := ref.Context().Digest(d.String())
	if t, ok := ref.(name.Tag); ok && pk.Version == "" {
		pk.Version = t.TagStr()
	}
	pk.Pinned = pinned.String()
	// Everything from here comes by digest: the manifest is checked against it.
	img, err = remote.Image(pinned, ropts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrOCIFetch, pinned, clip.Bytes(err.Error(), 600))
	}
	return img, nil
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// imagePluginName is the repository's last element (or the archive's file name without
// its extension), with what a plugin name cannot hold replaced.
func imagePluginName(r OCIRequest) string {
	n := r.Ref
	if r.Archive {
		n = strings.TrimSuffix(filepath.Base(n), filepath.Ext(n))
	} else {
		if i := strings.IndexAny(n, "@"); i >= 0 {
			n = n[:i]
		}
		if i := strings.LastIndex(n, "/"); i >= 0 {
			n = n[i+1:]
		}
		if i := strings.Index(n, ":"); i >= 0 {
			n = n[:i]
		}
	}
	return (&NPMRequest{Package: n}).pluginName()
}

// Unpack fetches the layers (each by its digest) and applies them in order to dst (made
// here, empty): every uncompressed layer is checked against the config's diff_id for it
// (the config was checked against the manifest, the manifest against the pinned digest),
// and unpacked safely (ociunpack_linux.go): whiteouts applied; no device node, FIFO or
// setuid/setgid bit; no path, symlink or hard link leading out of dst; within the bounds.
func (pk *OCIPackage) Unpack(ctx context.Context, dst string) error {
	if pk.img == nil {
		return fmt.Errorf("%w: not fetched", ErrOCIImage)
	}
	defer pk.Close()
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	u, err := newUnpacker(dst, pk.bounds)
	if err != nil {
		return err
	}
	defer u.close()
	layers, err := pk.img.Layers()
	if err != nil {
		return fmt.Errorf("%w: layers: %v", ErrOCIImage, err)
	}
	if len(layers) != len(pk.diffs) {
		return fmt.Errorf("%w: %d layers, %d diff_ids", ErrOCIImage, len(layers), len(pk.diffs))
	}
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		u.index = i + 1
		rc, err := l.Uncompressed()
		if err != nil {
			return fmt.Errorf("%w: layer %d: %v", ErrOCIFetch, i+1, err)
		}
		h := sha256.New()
		err = u.applyLayer(io.TeeReader(rc, h))
		if err == nil {
			// The tar's end is not the blob's: what follows is read (bounded) and hashed too.
			if _, cerr := io.Copy(h, io.LimitReader(rc, 1<<20)); cerr != nil {
				err = fmt.Errorf("%w: layer %d: %v; nothing was installed", ErrOCIImage, i+1, cerr)
			}
		}
		cerr := rc.Close()
		if err != nil {
			return err
		}
		if cerr != nil {
			return fmt.Errorf("%w: layer %d: %v", ErrOCIImage, i+1, cerr)
		}
		if got := hashString(h); got != pk.diffs[i].String() {
			return fmt.Errorf("%w: layer %d is %s uncompressed, and the config says %s; nothing was installed", ErrOCIImage, i+1, got, pk.diffs[i])
		}
	}
	pk.SetIDDropped = u.setid
	return nil
}

// Close ends the pull's deadline (Unpack does; a caller that never unpacks calls it).
func (pk *OCIPackage) Close() {
	if pk.cancel != nil {
		pk.cancel()
	}
}

// cleanName is a layer entry's name relative to the rootfs ("" for the root itself).
func cleanName(name string) (string, bool) {
	if strings.ContainsRune(name, 0) || len(name) > 4096 {
		return "", false
	}
	for _, e := range strings.Split(name, "/") {
		if e == ".." {
			return "", false
		}
	}
	c := path.Clean("/" + name)
	if c == "/" {
		return "", true
	}
	return c[1:], true
}

func hashString(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// Changes lists, one line each, how r differs from prev (what the user approved before),
// and the digest change: like NPMRequest.Changes.
func (r *OCIRequest) Changes(prev *OCIRequest) []string {
	var p *NPMRequest
	if prev != nil {
		pn := prev.npm()
		pn.Package = prev.Source()
		p = &pn
	}
	n := r.npm()
	n.Package = r.Source()
	out := n.Changes(p)
	// The npm wording says "package"; an image is a source.
	for i, l := range out {
		if strings.HasPrefix(l, "package: ") {
			out[i] = "image: " + strings.TrimPrefix(l, "package: ")
		}
	}
	return out
}

// PinnedDigest is the content digest an entry is pinned to, for a lock file: an image's
// manifest digest; "" for sources fledge pins otherwise (or not at all).
func (e *Entry) PinnedDigest() string {
	if e.OCI != nil {
		return e.OCI.Digest
	}
	return ""
}
