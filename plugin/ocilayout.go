// SPDX-License-Identifier: MIT

package plugin

import (
	"archive/tar"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"io"
	"os"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// archiveImage opens an oci-archive: file: `docker save` output (a manifest.json at its
// top), or an OCI image layout (an oci-layout file, index.json, blobs/) in a tar, which is
// unpacked, plain files and directories only, beneath a temp dir first (cleanup removes
// it; the layers are read from there until Unpack ends).
func archiveImage(path string, b ImageBounds) (img v1.Image, cleanup func(), err error) {
	nop := func() {}
	isLayout, err := tarHasOCILayout(path)
	if err != nil {
		return nil, nop, fmt.Errorf("%w: %s: %v", ErrOCIFetch, clip.Bytes(path, 80), err)
	}
	if !isLayout {
		img, err := tarball.ImageFromPath(path, nil)
		if err != nil {
			return nil, nop, fmt.Errorf("%w: %s: %v", ErrOCIFetch, clip.Bytes(path, 80), err)
		}
		return img, nop, nil
	}
	dir, err := os.MkdirTemp("", "fledge-oci-layout-")
	if err != nil {
		return nil, nop, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	if err := extractPlain(path, dir, b); err != nil {
		cleanup()
		return nil, nop, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		cleanup()
		return nil, nop, fmt.Errorf("%w: %s: OCI layout: %v", ErrOCIImage, clip.Bytes(path, 80), err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		cleanup()
		return nil, nop, fmt.Errorf("%w: %s: index.json: %v", ErrOCIImage, clip.Bytes(path, 80), err)
	}
	var pick *v1.Descriptor
	for i, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		if d.Platform == nil || (d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH) {
			if pick != nil {
				cleanup()
				return nil, nop, fmt.Errorf("%w: %s holds several images for linux/%s; install one by digest from a registry", ErrOCIImage, clip.Bytes(path, 80), runtime.GOARCH)
			}
			pick = &im.Manifests[i]
		}
	}
	if pick == nil {
		cleanup()
		return nil, nop, fmt.Errorf("%w: %s holds no image for linux/%s", ErrOCIImage, clip.Bytes(path, 80), runtime.GOARCH)
	}
	img, err = idx.Image(pick.Digest)
	if err == nil {
		var d v1.Hash
		if d, err = img.Digest(); err == nil && d != pick.Digest {
			err = fmt.Errorf("its manifest is %s, and index.json says %s", d, pick.Digest)
		}
	}
	if err != nil {
		cleanup()
		return nil, nop, fmt.Errorf("%w: %s: %v", ErrOCIImage, clip.Bytes(path, 80), err)
	}
	return img, cleanup, nil
}

// tarHasOCILayout: the tar at path has an oci-layout file at its top.
func tarHasOCILayout(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for i := 0; i < 100_000; i++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if n, ok := cleanName(h.Name); ok && n == "oci-layout" {
			return true, nil
		}
	}
	return false, nil
}

// extractPlain unpacks the tar at path beneath dir with the layer unpacker, refusing
// anything but plain files and directories.
func extractPlain(path, dir string, b ImageBounds) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrOCIFetch, err)
	}
	defer f.Close()
	u, err := newUnpacker(dir, b)
	if err != nil {
		return err
	}
	defer u.close()
	u.plain = true
	return u.applyLayer(f)
}
