package kubeletnode

import (
	"strings"

	"github.com/kubevol/kubevol/internal/image"
)

// GlibcDNSTestingImage is the e2e suite's glibc-dns-testing image (imageutils.GlibcDnsTesting
// of the same release), which the storage suite's multiVolume specs run as the pods that
// share one volume. Upstream's is Debian with dnsutils; the specs need only a shell and the
// file tools, so this one is the busybox layer with the host's glibc getent and the
// libraries it links, so that it resolves names through glibc, as its name promises.
const GlibcDNSTestingImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"

// getentHostBinary is glibc's getent, from Debian's libc-bin (always installed).
const getentHostBinary = "/usr/bin/getent"

// GlibcDNSTestingImages builds the glibc-dns-testing image for this platform.
func GlibcDNSTestingImages() ([]image.Named, error) {
	top, err := glibcLayer()
	if err != nil {
		return nil, err
	}
	return onBusybox(GlibcDNSTestingImage, image.Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin:/usr/bin"}}, top)
}

// glibcLayer is what the image adds to busybox: getent, its libraries and nsswitch.conf.
func glibcLayer() (*image.Layer, error) {
	libs, err := sharedLibraries(getentHostBinary)
	if err != nil {
		return nil, err
	}
	top := image.NewLayer().HostFile(strings.TrimPrefix(getentHostBinary, "/"), getentHostBinary, 0o755).
		File("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	for _, l := range libs {
		top.HostFile(strings.TrimPrefix(l, "/"), l, 0o755)
	}
	return top, nil
}
