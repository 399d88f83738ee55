// Command images builds kubevol's container images (internal/build/kubevolimages) from binaries and
// Debian packages already on disk, writes each as an OCI archive and, with -push, pushes
// them. With -binaries (or -binary) it builds the binaries instead, with
// kubevolimages.GoBuildFlags, the one definition of how a shipped binary is built. With -dist it
// builds the control plane of each platform with the same flags and writes the release
// archives (internal/build/dist). `make build`, `make binaries`, `make images`, `make push` and
// `make dist` run it from the module root; see docs/images.md and docs/install.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kubevol/kubevol/internal/build/kubevolimages"
	"github.com/kubevol/kubevol/internal/build/ociimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run() error {
	prefix := flag.String("prefix", kubevolimages.DefaultPrefix, "registry prefix: images are <prefix>/<name>:<tag>")
	tag := flag.String("tag", "", "image tag (default: -version)")
	version := flag.String("version", "", "version the binaries are stamped with (required)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms")
	binDir := flag.String("bin-dir", "_output/bin", "binaries, as <dir>/<os>_<arch>/kubevol")
	debsDir := flag.String("debs-dir", "_output/debs", "Debian packages, as <dir>/<arch>/{root,packages} (hack/debs.sh)")
	out := flag.String("out", "_output/images", "directory of the OCI archives, <name>.oci.tar, and digests.txt")
	only := flag.String("only", "", "comma-separated image names (default: all)")
	push := flag.Bool("push", false, "push each image to its reference instead of writing archives")
	binaries := flag.Bool("binaries", false, "build the binary of each platform into -bin-dir instead of the images")
	binary := flag.String("binary", "", "build the binary of this machine's platform into this path instead of the images")
	distDir := flag.String("dist", "", "build the control plane (kubevol-cluster) of each platform into -bin-dir and write the release archives of the binaries there and their SHA256SUMS into this directory, instead of the images")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "images: unexpected arguments:", flag.Args())
		os.Exit(2)
	}
	if *version == "" {
		fmt.Fprintln(os.Stderr, "images: -version is required")
		os.Exit(2)
	}
	if *tag == "" {
		*tag = *version
	}
	b := &kubevolimages.Builder{Prefix: *prefix, Tag: *tag, Version: *version}
	for _, s := range strings.Split(*platforms, ",") {
		p, err := kubevolimages.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(2)
		}
		b.Platforms = append(b.Platforms, p)
	}
	binaryOf := func(p ociimage.Platform) string { return filepath.Join(*binDir, p.OS+"_"+p.Architecture, "kubevol") }
	switch {
	case *binary != "":
		return goBuild(ociimage.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}, *version, *binary)
	case *binaries:
		for _, p := range b.Platforms {
			if err := goBuild(p, *version, binaryOf(p)); err != nil {
				return err
			}
		}
		return nil
	case *distDir != "":
		return writeDist(context.Background(), b.Platforms, *version, *binDir, *distDir)
	}
	b.Inputs = kubevolimages.Inputs{
		Binary:   binaryOf,
		Tools:    func(p ociimage.Platform) string { return filepath.Join(*debsDir, p.Architecture, "root") },
		Packages: func(p ociimage.Platform) string { return filepath.Join(*debsDir, p.Architecture, "packages") },
	}
	roles := kubevolimages.Roles
	if *only != "" {
		roles = nil
		for _, n := range strings.Split(*only, ",") {
			r, ok := kubevolimages.Lookup(strings.TrimSpace(n))
			if !ok {
				fmt.Fprintf(os.Stderr, "images: no image named %q\n", n)
				os.Exit(2)
			}
			roles = append(roles, r)
		}
	}
	var digests strings.Builder
	for _, r := range roles {
		n, err := b.Build(r)
		if err != nil {
			return err
		}
		d, err := n.Index.Digest()
		if err != nil {
			return err
		}
		if *push {
			if err := ociimage.Push(context.Background(), n); err != nil {
				return fmt.Errorf("push %s: %w", n.Ref, err)
			}
			fmt.Printf("pushed %s@%s\n", n.Ref, d)
			continue
		}
		file := filepath.Join(*out, r.Name+".oci.tar")
		if err := ociimage.WriteArchiveFile(file, n); err != nil {
			return err
		}
		fmt.Printf("%s %s %s\n", file, n.Ref, d)
		fmt.Fprintf(&digests, "%s@%s\n", n.Ref, d)
	}
	if *push {
		return nil
	}
	return os.WriteFile(filepath.Join(*out, "digests.txt"), []byte(digests.String()), 0o644)
}

// goBuild builds the binary of p from the module in the working directory.
func goBuild(p ociimage.Platform, version, out string) error {
	fmt.Printf("go build %s %s\n", p, out)
	return kubevolimages.GoBuild(context.Background(), ".", p, version, out)
}
