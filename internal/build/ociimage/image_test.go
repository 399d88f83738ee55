package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

var (
	amd64 = Platform{OS: "linux", Architecture: "amd64"}
	arm64 = Platform{OS: "linux", Architecture: "arm64"}
)

// tree writes the same files with the given time and permission bits.
func tree(t *testing.T, mtime time.Time, perm os.FileMode) string {
	dir := t.TempDir()
	for _, f := range []string{"usr/sbin/mkfs", "usr/lib/libx.so.1", "etc/x.conf"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		mode := perm
		if strings.Contains(f, "sbin") {
			mode |= 0o100
		}
		if err := os.WriteFile(p, []byte(f), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("libx.so.1", filepath.Join(dir, "usr/lib/libx.so")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func digest(t *testing.T, l *Layer) v1.Hash {
	t.Helper()
	built, err := l.Build()
	if err != nil {
		t.Fatal(err)
	}
	d, err := built.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLayerIgnoresHostTimesAndUmask(t *testing.T) {
	a := digest(t, NewLayer().Tree("/", tree(t, time.Now(), 0o600), nil))
	b := digest(t, NewLayer().Tree("/", tree(t, time.Unix(12345, 0), 0o664), nil))
	if a != b {
		t.Fatalf("same files, different digests: %s and %s", a, b)
	}
	c := digest(t, NewLayer().Tree("/", tree(t, time.Now(), 0o600), func(n string) bool { return !strings.HasPrefix(n, "etc") }))
	if c == a {
		t.Fatal("a filtered tree has the digest of the whole tree")
	}
}

func TestLayerEntries(t *testing.T) {
	l := NewLayer().
		File("/etc/passwd", 0o644, []byte("root:x:0:0::/:/sbin/nologin\n")).
		Dir("/tmp", 0o777|os.ModeSticky).
		Symlink("/csi-provisioner", "/kubevol").
		File("/home/nonroot/.keep", 0o600, nil, Owner{UID: 65532, GID: 65532})
	var buf bytes.Buffer
	if err := l.WriteTar(&buf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(Epoch) {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
		}
		got = append(got, h.Name)
		switch h.Name {
		case "tmp/":
			if h.Mode != 01777 {
				t.Errorf("tmp mode %o", h.Mode)
			}
		case "home/nonroot/.keep":
			if h.Uid != 65532 || h.Gid != 65532 {
				t.Errorf("owner %d:%d", h.Uid, h.Gid)
			}
		case "csi-provisioner":
			if h.Linkname != "/kubevol" {
				t.Errorf("link %q", h.Linkname)
			}
		}
	}
	want := "csi-provisioner etc/ etc/passwd home/ home/nonroot/ home/nonroot/.keep tmp/"
	if strings.Join(got, " ") != want {
		t.Fatalf("entries %q, want %q", strings.Join(got, " "), want)
	}
}

func testIndex(t *testing.T, user string) v1.ImageIndex {
	t.Helper()
	imgs := map[Platform]v1.Image{}
	for _, p := range []Platform{amd64, arm64} {
		l, err := NewLayer().File("/kubevol", 0o755, []byte("binary for "+p.Architecture)).Build()
		if err != nil {
			t.Fatal(err)
		}
		img, err := New(p, Config{Entrypoint: []string{"/kubevol"}, User: user, Env: []string{"PATH=/usr/bin"}}, l)
		if err != nil {
			t.Fatal(err)
		}
		imgs[p] = img
	}
	idx, err := Index(imgs, []Platform{amd64, arm64})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestIndexAndArchiveAreReproducible(t *testing.T) {
	a, b := testIndex(t, "65532:65532"), testIndex(t, "65532:65532")
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("index digests differ: %s %s", da, db)
	}
	if dc, _ := testIndex(t, "0").Digest(); dc == da {
		t.Fatal("a different User gives the same digest")
	}
	im, err := a.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 || im.Manifests[1].Platform.Architecture != "arm64" {
		t.Fatalf("index manifests %+v", im.Manifests)
	}
	img, err := a.Image(im.Manifests[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "arm64" || cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/kubevol" {
		t.Fatalf("config %+v", cf)
	}

	var x, y bytes.Buffer
	if err := WriteArchive(&x, Named{Ref: "example.test/kubevol/x:v1", Index: a}); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&y, Named{Ref: "example.test/kubevol/x:v1", Index: b}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x.Bytes(), y.Bytes()) {
		t.Fatal("archives of the same index differ")
	}
	tr := tar.NewReader(&x)
	var index v1.IndexManifest
	blobs := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(h.Name, "blobs/sha256/") && h.Typeflag == tar.TypeReg {
			blobs++
		}
		if h.Name == "index.json" {
			if err := json.NewDecoder(tr).Decode(&index); err != nil {
				t.Fatal(err)
			}
		}
	}
	// index, two manifests, two configs, two layers
	if blobs != 7 {
		t.Errorf("%d blobs, want 7", blobs)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Digest != da ||
		index.Manifests[0].Annotations[annotationContainerdName] != "example.test/kubevol/x:v1" ||
		index.Manifests[0].Annotations[annotationRefName] != "v1" {
		t.Fatalf("index.json %+v", index)
	}
}

func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(nopLogger())))
	defer srv.Close()
	idx := testIndex(t, "65532")
	ref := strings.TrimPrefix(srv.URL, "http://") + "/kubevol/csi-provisioner:v1"
	if err := Push(context.Background(), Named{Ref: ref, Index: idx}, name.Insecure); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if d, _ := got.Digest(); d != want {
		t.Fatalf("pushed %s, registry has %s", want, d)
	}
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
