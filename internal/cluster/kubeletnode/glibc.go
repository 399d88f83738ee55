package kubeletnode

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/kubevol/kubevol/internal/build/ociimage"
)

// GlibcDNSTestingImage is the e2e suite's glibc-dns-testing image (imageutils.GlibcDnsTesting
// of the same release), which the storage suite's multiVolume specs run as the pods that
// share one volume. Upstream's is Debian (bookworm-slim) with dnsutils. This one is the
// busybox layer with, from the host's Debian packages, dash as /bin/sh, GNU coreutils (the
// block specs write with GNU dd's oflag=nocache, which busybox's dd refuses) and glibc's
// getent, with the libraries they link, so that it resolves names through glibc, as its
// name promises. The shell must be dash: busybox's runs its own applets before any program
// in PATH.
const GlibcDNSTestingImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"

// getentHostBinary is glibc's getent, from Debian's libc-bin (always installed).
const getentHostBinary = "/usr/bin/getent"

// debianPath is the PATH of Debian's images: /usr/bin's GNU tools come before the busybox
// applets in /bin.
const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// GlibcDNSTestingImages builds the glibc-dns-testing image for this platform.
func GlibcDNSTestingImages() ([]ociimage.Named, error) {
	top, err := glibcLayer()
	if err != nil {
		return nil, err
	}
	return onBusybox(GlibcDNSTestingImage, ociimage.Config{Cmd: []string{"/bin/sh"}, Env: []string{debianPath}}, top)
}

// glibcLayer is what the image adds to busybox: dash, coreutils, getent, their libraries and
// nsswitch.conf. A program of these replaces the busybox applet of its name in /bin.
func glibcLayer() (*ociimage.Layer, error) {
	bins, err := debianPrograms("dash", "coreutils")
	if err != nil {
		return nil, err
	}
	bins = append(bins, getentHostBinary)
	top := ociimage.NewLayer().File("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")).
		Symlink("bin/sh", "dash")
	for _, b := range bins {
		top.HostFile(strings.TrimPrefix(b, "/"), b, 0o755)
	}
	if err := addSharedLibraries(top, bins...); err != nil {
		return nil, err
	}
	return top, nil
}

// debianPrograms are the executables of the host's packages pkgs in /bin and /usr/bin, at
// the paths the packages install them at (dpkg -L, one path a line), sorted.
func debianPrograms(pkgs ...string) ([]string, error) {
	out, err := exec.Command("dpkg", append([]string{"-L"}, pkgs...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg -L %s (the glibc-dns-testing image carries Debian's programs): %w", strings.Join(pkgs, " "), err)
	}
	var bins []string
	for _, p := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(p, "/bin/") && !strings.HasPrefix(p, "/usr/bin/") {
			continue
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			bins = append(bins, p)
		}
	}
	if len(bins) == 0 {
		return nil, fmt.Errorf("dpkg -L %s lists no program", strings.Join(pkgs, " "))
	}
	sort.Strings(bins)
	return bins, nil
}
