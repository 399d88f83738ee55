package kubeletnode

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kubevol/kubevol/internal/build/ociimage"
)

// NginxImage is the e2e suite's nginx image (imageutils.Nginx of the same release). The
// storage suite runs its exec spec ("should allow exec of files on the volume") in it, and
// the PV and local-volume suites serve from it.
const NginxImage = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"

// nginxHostBinary is where Debian's nginx package installs its server.
const nginxHostBinary = "/usr/sbin/nginx"

// nginxConf serves /usr/share/nginx/html on port 80 in the foreground, as the upstream
// image does, logging to the container's streams.
const nginxConf = `daemon off;
user root;
worker_processes 1;
error_log stderr;
pid /run/nginx.pid;
events { worker_connections 64; }
http {
  access_log /dev/stdout;
  server { listen 80; root /usr/share/nginx/html; }
}
`

// NginxBinary returns Debian's nginx server: the installed one, or else the nginx package
// downloaded by apt-get (not installed: no service starts) and unpacked under dir, once.
func NginxBinary(ctx context.Context, dir string) (string, error) {
	if _, err := os.Stat(nginxHostBinary); err == nil {
		return nginxHostBinary, nil
	}
	unpacked := filepath.Join(dir, "nginx-deb")
	bin := filepath.Join(unpacked, nginxHostBinary)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(dir, "nginx-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", "download", "nginx")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download nginx (the nginx image is made of Debian's nginx): %w: %s", err, strings.TrimSpace(string(out)))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "nginx_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download nginx left %d packages in %s", len(debs), tmp)
	}
	x := filepath.Join(tmp, "x")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], x).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %w: %s", debs[0], err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(x, unpacked); err != nil {
		// Another run unpacked it meanwhile (two ups started at once on a cold cache): the
		// package is the same, so its copy serves.
		if _, statErr := os.Stat(bin); statErr == nil {
			return bin, nil
		}
		return "", err
	}
	return bin, nil
}

// NginxImages is the e2e suite's nginx image: Debian's nginx with the host's shared
// libraries it links (and their own), on the busybox layer, so that the shell the specs run
// in it is there too.
func NginxImages(nginx string) ([]ociimage.Named, error) {
	top := ociimage.NewLayer().HostFile(strings.TrimPrefix(nginxHostBinary, "/"), nginx, 0o755).
		File("etc/nginx/nginx.conf", 0o644, []byte(nginxConf)).
		File("usr/share/nginx/html/index.html", 0o644, []byte("<html><body>nginx</body></html>\n")).
		Dir("run", 0o755).Dir("var/log/nginx", 0o755).Dir("var/lib/nginx", 0o755)
	if err := addSharedLibraries(top, nginx); err != nil {
		return nil, err
	}
	return onBusybox(NginxImage, ociimage.Config{Cmd: []string{"nginx"}, Env: []string{"PATH=/bin:/usr/sbin"}}, top)
}

// libDirs are where the dynamic loader of a Debian host finds libraries.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib", "/lib64"}

// addSharedLibraries adds to l, at their host paths, what the host's ELF executables bins
// load: sharedLibraries.
func addSharedLibraries(l *ociimage.Layer, bins ...string) error {
	libs, err := sharedLibraries(bins...)
	if err != nil {
		return err
	}
	for _, p := range libs {
		l.HostFile(strings.TrimPrefix(p, "/"), p, 0o755)
	}
	return nil
}

// sharedLibraries is the program interpreters and the closure of the DT_NEEDED libraries of
// the ELF executables bins, as host paths, each once.
func sharedLibraries(bins ...string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	var walk func(path string, top bool) error
	walk = func(path string, top bool) error {
		f, err := elf.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if top {
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					b := make([]byte, p.Filesz)
					if _, err := p.ReadAt(b, 0); err != nil {
						return fmt.Errorf("%s: interpreter: %w", path, err)
					}
					if interp := strings.TrimRight(string(b), "\x00"); !seen[interp] {
						seen[interp] = true
						out = append(out, interp)
					}
				}
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, n := range needed {
			lib := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, n)); err == nil {
					lib = filepath.Join(d, n)
					break
				}
			}
			if lib == "" {
				return fmt.Errorf("%s needs %s, which is in none of %s", path, n, strings.Join(libDirs, ", "))
			}
			if seen[lib] {
				continue
			}
			seen[lib] = true
			out = append(out, lib)
			if err := walk(lib, false); err != nil {
				return err
			}
		}
		return nil
	}
	for _, b := range bins {
		if err := walk(b, true); err != nil {
			return nil, err
		}
	}
	return out, nil
}
