package kubeletnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kubevol/kubevol/internal/build/ociimage"
)

// Image names the e2e suite asks for by default (test/utils/image of the same Kubernetes
// release), so that it finds them without a KUBE_TEST_REPO_LIST; a list naming these
// registries is written for it anyway (RepoList).
const (
	BusyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
)

// RepoList is a KUBE_TEST_REPO_LIST file naming the registries the images above are in.
const RepoList = "gcRegistry: registry.k8s.io\npromoterE2eRegistry: registry.k8s.io/e2e-test-images\nsigStorageRegistry: registry.k8s.io/sig-storage\n"

func platform() ociimage.Platform {
	return ociimage.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// busyboxLayer is the static busybox with a link for each of its applets in /bin, a root
// user and a /tmp.
func busyboxLayer() (*ociimage.Layer, error) {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", BusyboxPath, err)
	}
	l := ociimage.NewLayer().HostFile("bin/busybox", BusyboxPath, 0o755).
		Dir("tmp", 0o1777|os.ModeSticky).Dir("etc", 0o755).Dir("proc", 0o755).Dir("sys", 0o755).Dir("dev", 0o755).
		File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")).
		File("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\n"))
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" {
			l.Symlink("bin/"+a, "busybox")
		}
	}
	return l, nil
}

// TestImages builds the sandbox image and busybox from the static busybox.
func TestImages() ([]ociimage.Named, error) {
	bl, err := busyboxLayer()
	if err != nil {
		return nil, err
	}
	layer, err := bl.Build()
	if err != nil {
		return nil, err
	}
	// The sandbox only holds the pod's namespaces: a shell that sleeps and exits on SIGTERM.
	pause, err := ociimage.New(platform(), ociimage.Config{Entrypoint: []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}}, layer)
	if err != nil {
		return nil, err
	}
	busybox, err := ociimage.New(platform(), ociimage.Config{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}}, layer)
	if err != nil {
		return nil, err
	}
	var out []ociimage.Named
	for _, n := range []struct {
		ref string
		img v1.Image
	}{{SandboxImage, pause}, {BusyboxImage, busybox}} {
		idx, err := ociimage.Index(map[ociimage.Platform]v1.Image{platform(): n.img}, []ociimage.Platform{platform()})
		if err != nil {
			return nil, err
		}
		out = append(out, ociimage.Named{Ref: n.ref, Index: idx})
	}
	return out, nil
}

// AgnhostImages is the e2e suite's agnhost image: the static agnhost (built from the same
// Kubernetes release) on the busybox layer, with agnhost's entrypoint and default command.
func AgnhostImages(agnhost string) ([]ociimage.Named, error) {
	top := ociimage.NewLayer().HostFile("agnhost", agnhost, 0o755)
	return onBusybox(AgnhostImage, ociimage.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{"PATH=/bin:/"}}, top)
}

// onBusybox is the image ref of this platform: the busybox layer, then top.
func onBusybox(ref string, cfg ociimage.Config, top *ociimage.Layer) ([]ociimage.Named, error) {
	bl, err := busyboxLayer()
	if err != nil {
		return nil, err
	}
	base, err := bl.Build()
	if err != nil {
		return nil, err
	}
	tl, err := top.Build()
	if err != nil {
		return nil, err
	}
	img, err := ociimage.New(platform(), cfg, base, tl)
	if err != nil {
		return nil, err
	}
	idx, err := ociimage.Index(map[ociimage.Platform]v1.Image{platform(): img}, []ociimage.Platform{platform()})
	if err != nil {
		return nil, err
	}
	return []ociimage.Named{{Ref: ref, Index: idx}}, nil
}

// Import loads an image archive (OCI layout, internal/build/ociimage's WriteArchiveFile) into
// containerd's k8s.io namespace, where the kubelet's CRI finds it.
func (n *Node) Import(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.Socket(), "--namespace", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}
