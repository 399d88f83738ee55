// Package kubevolimages holds the recipes of kubevol's container images: one per role, each
// started as upstream starts that role's image (ENTRYPOINT ["/<name>"], flags only), all on
// internal/build/ociimage. The sidecar images are the one static kubevol binary plus a minimal base
// (users, /tmp); the driver and node-agent images add the mount and filesystem tools they
// execute, taken from Debian packages (see Tools).
package kubevolimages

import (
	"fmt"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kubevol/kubevol/internal/build/ociimage"
)

// DefaultPrefix is the registry prefix of the images: <prefix>/<name>:<tag>.
const DefaultPrefix = "ghcr.io/kubevol"

// NonRoot is distroless's "nonroot" user (65532:65532), which deploy/ runs the sidecars as
// (securityContext runAsUser/runAsGroup). The images themselves run as root, as upstream's
// distroless/static images do: swapped into an existing driver's manifest that sets no
// user, a sidecar must still connect to a driver socket only root may write (0755 root:root,
// as the hostpath driver and others make theirs).
const NonRoot = 65532

// Binary is where the kubevol binary lives in every image; each entrypoint is a symlink to it
// (the binary dispatches on the base name of argv[0]).
const Binary = "/usr/bin/kubevol"

// Role is one image.
type Role struct {
	// Name is the image's repository name under the prefix and its entrypoint, /<Name>.
	Name string
	// Tools: the image carries the mount and filesystem tools and runs as root.
	Tools bool
}

// Roles are every image kubevol ships: upstream's sidecar names first, then kubevol's own.
var Roles = []Role{
	{Name: "csi-provisioner"},
	{Name: "csi-attacher"},
	{Name: "csi-resizer"},
	{Name: "csi-snapshotter"},
	{Name: "snapshot-controller"},
	{Name: "snapshot-conversion-webhook"},
	{Name: "kubevol-csr-approver"},
	{Name: "kubevol-driver", Tools: true},
	{Name: "kubevol-node", Tools: true},
}

// Lookup returns the role named name.
func Lookup(name string) (Role, bool) {
	for _, r := range Roles {
		if r.Name == name {
			return r, true
		}
	}
	return Role{}, false
}

// Platforms are the platforms every image is built for.
var Platforms = []ociimage.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// ParsePlatform reads "linux/arm64".
func ParsePlatform(s string) (ociimage.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "linux" || parts[1] == "" {
		return ociimage.Platform{}, fmt.Errorf("platform %q: want linux/<arch>", s)
	}
	p := ociimage.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// Inputs are the built files an image is made of, per platform.
type Inputs struct {
	// Binary is the path of the static kubevol binary for the platform.
	Binary func(ociimage.Platform) string
	// Tools is the root of the extracted Debian packages for the platform (hack/debs.sh's
	// DIR/root) and Packages their name=version list; needed by roles with Tools.
	Tools    func(ociimage.Platform) string
	Packages func(ociimage.Platform) string
}

// Builder builds images; layers shared between roles are built once.
type Builder struct {
	Prefix    string
	Tag       string
	Version   string
	Platforms []ociimage.Platform
	Inputs    Inputs

	base   v1.Layer
	binary map[ociimage.Platform]v1.Layer
	tools  map[ociimage.Platform]v1.Layer
	pkgs   map[ociimage.Platform]string
}

// Ref is the reference of the role's image.
func (b *Builder) Ref(r Role) string { return path.Join(b.Prefix, r.Name) + ":" + b.Tag }

// Build returns the role's multi-platform index.
func (b *Builder) Build(r Role) (ociimage.Named, error) {
	imgs := map[ociimage.Platform]v1.Image{}
	for _, p := range b.Platforms {
		img, err := b.platformImage(r, p)
		if err != nil {
			return ociimage.Named{}, fmt.Errorf("%s for %s: %w", r.Name, p, err)
		}
		imgs[p] = img
	}
	idx, err := ociimage.Index(imgs, b.Platforms)
	if err != nil {
		return ociimage.Named{}, err
	}
	return ociimage.Named{Ref: b.Ref(r), Index: idx}, nil
}

func (b *Builder) platformImage(r Role, p ociimage.Platform) (v1.Image, error) {
	layers := []v1.Layer{}
	base, err := b.baseLayer()
	if err != nil {
		return nil, err
	}
	layers = append(layers, base)
	labels := map[string]string{
		"org.opencontainers.image.title":   r.Name,
		"org.opencontainers.image.version": b.Version,
		"org.opencontainers.image.source":  "https://github.com/kubevol/kubevol",
	}
	// Every image runs as root unless its pod says otherwise (see NonRoot); the driver and
	// node-agent images need it besides: mount(2), losetup and mkfs run as root.
	const user = "0:0"
	if r.Tools {
		tools, pkgs, err := b.toolsLayer(p)
		if err != nil {
			return nil, err
		}
		layers = append(layers, tools)
		labels["io.kubevol.debian-packages"] = pkgs
	}
	bin, err := b.binaryLayer(p)
	if err != nil {
		return nil, err
	}
	layers = append(layers, bin)
	return ociimage.New(p, ociimage.Config{
		Entrypoint: []string{"/" + r.Name},
		User:       user,
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir: "/",
		Labels:     labels,
	}, layers...)
}

// baseLayer is what distroless/static gives a static binary: root and nonroot users, /tmp.
// It is the same for every platform and role.
func (b *Builder) baseLayer() (v1.Layer, error) {
	if b.base != nil {
		return b.base, nil
	}
	nr := ociimage.Owner{UID: NonRoot, GID: NonRoot}
	l, err := ociimage.NewLayer().
		File("/etc/passwd", 0o644, []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot))).
		File("/etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnogroup:x:65534:\nnonroot:x:%d:\n", NonRoot))).
		File("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")).
		Dir("/root", 0o700).
		Dir("/home/nonroot", 0o700, nr).
		Dir("/tmp", 0o777|os.ModeSticky).
		Build()
	if err != nil {
		return nil, err
	}
	b.base = l
	return l, nil
}

// binaryLayer holds the binary and one entrypoint link per role, so that every role's image
// of a platform shares this one layer.
func (b *Builder) binaryLayer(p ociimage.Platform) (v1.Layer, error) {
	if l, ok := b.binary[p]; ok {
		return l, nil
	}
	src := b.Inputs.Binary(p)
	if _, err := os.Stat(src); err != nil {
		return nil, fmt.Errorf("kubevol binary: %w", err)
	}
	l := ociimage.NewLayer().HostFile(Binary, src, 0o755)
	for _, r := range Roles {
		l.Symlink("/"+r.Name, strings.TrimPrefix(Binary, "/"))
	}
	built, err := l.Build()
	if err != nil {
		return nil, err
	}
	if b.binary == nil {
		b.binary = map[ociimage.Platform]v1.Layer{}
	}
	b.binary[p] = built
	return built, nil
}

func (b *Builder) toolsLayer(p ociimage.Platform) (v1.Layer, string, error) {
	if l, ok := b.tools[p]; ok {
		return l, b.pkgs[p], nil
	}
	if b.Inputs.Tools == nil {
		return nil, "", fmt.Errorf("no Debian packages given for the tools")
	}
	pkgs, err := os.ReadFile(b.Inputs.Packages(p))
	if err != nil {
		return nil, "", fmt.Errorf("the Debian package list (hack/debs.sh): %w", err)
	}
	l, err := Tools(b.Inputs.Tools(p), p)
	if err != nil {
		return nil, "", err
	}
	built, err := l.Build()
	if err != nil {
		return nil, "", err
	}
	if b.tools == nil {
		b.tools, b.pkgs = map[ociimage.Platform]v1.Layer{}, map[ociimage.Platform]string{}
	}
	list := strings.Join(strings.Fields(string(pkgs)), " ")
	b.tools[p], b.pkgs[p] = built, list
	return built, list, nil
}
