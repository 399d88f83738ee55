package ociimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Named is an index with the reference it is known by, "registry/repo:tag".
type Named struct {
	Ref   string
	Index v1.ImageIndex
}

// Annotations of index.json that name an image: containerd's import takes the full name from
// the first, other OCI tools the tag from the second.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

type blob struct {
	size int64
	open func() (io.ReadCloser, error)
}

// collect adds the index's own manifest, its images' manifests, configs and layers.
func collect(idx v1.ImageIndex, blobs map[v1.Hash]blob) error {
	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	blobs[d] = rawBlob(raw)
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			return err
		}
		raw, err := img.RawManifest()
		if err != nil {
			return err
		}
		blobs[m.Digest] = rawBlob(raw)
		cfg, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		cd, err := img.ConfigName()
		if err != nil {
			return err
		}
		blobs[cd] = rawBlob(cfg)
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			ld, err := l.Digest()
			if err != nil {
				return err
			}
			size, err := l.Size()
			if err != nil {
				return err
			}
			blobs[ld] = blob{size: size, open: l.Compressed}
		}
	}
	return nil
}

func rawBlob(b []byte) blob {
	return blob{size: int64(len(b)), open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytesReader(b)), nil
	}}
}

// WriteArchive writes the images as one OCI image layout in a tar stream: oci-layout,
// index.json naming each index by its reference, and every blob once, in sorted order. The
// archive is importable with `ctr images import` (all platforms with --all-platforms).
func WriteArchive(w io.Writer, images ...Named) error {
	blobs := map[v1.Hash]blob{}
	top := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, n := range images {
		ref, err := name.NewTag(n.Ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image reference %q: %w", n.Ref, err)
		}
		if err := collect(n.Index, blobs); err != nil {
			return fmt.Errorf("%s: %w", n.Ref, err)
		}
		d, err := n.Index.Digest()
		if err != nil {
			return err
		}
		size, err := n.Index.Size()
		if err != nil {
			return err
		}
		top.Manifests = append(top.Manifests, v1.Descriptor{
			MediaType: types.OCIImageIndex,
			Digest:    d,
			Size:      size,
			Annotations: map[string]string{
				annotationContainerdName: ref.Name(),
				annotationRefName:        ref.TagStr(),
			},
		})
	}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	put := func(name string, size int64, open func() (io.ReadCloser, error)) error {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: Epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		rc, err := open()
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err := io.Copy(tw, rc)
		if err == nil && n != size {
			err = fmt.Errorf("archive entry %s: %d bytes, want %d", name, n, size)
		}
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: Epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	hashes := make([]v1.Hash, 0, len(blobs))
	for h := range blobs {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return hashes[i].String() < hashes[j].String() })
	for _, h := range hashes {
		b := blobs[h]
		if err := put("blobs/"+h.Algorithm+"/"+h.Hex, b.size, b.open); err != nil {
			return err
		}
	}
	if err := put("index.json", int64(len(indexJSON)), rawBlob(indexJSON).open); err != nil {
		return err
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := put("oci-layout", int64(len(layout)), rawBlob(layout).open); err != nil {
		return err
	}
	return tw.Close()
}

// WriteArchiveFile writes the archive to path through a temporary file, so that an
// interrupted build never leaves a truncated archive behind.
func WriteArchiveFile(path string, images ...Named) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := WriteArchive(tmp, images...); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Push uploads the index, its images and their blobs to the registry of n.Ref, with the
// credentials of the local Docker config (the default keychain) or anonymously.
func Push(ctx context.Context, n Named, opts ...name.Option) error {
	ref, err := name.NewTag(n.Ref, opts...)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", n.Ref, err)
	}
	return remote.WriteIndex(ref, n.Index, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
}
