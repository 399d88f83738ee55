package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kubevol/kubevol/internal/build/dist"
	"github.com/kubevol/kubevol/internal/build/kubevolimages"
	"github.com/kubevol/kubevol/internal/build/ociimage"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

// writeDist builds the control plane of each platform into binDir/<os>_<arch>/ beside the
// kubevol binary `make binaries` put there, and writes the release archive of the two into
// distDir, then SHA256SUMS of the archives. The control plane is built as the local cluster
// builds it (localcluster.BuildRelease: the kubelet's overlay, the upstream version stamp),
// with the flags and environment of every shipped binary (kubevolimages.GoBuildFlags, GoBuildEnv)
// and this version stamped, which `kubevol up` checks (localcluster.CheckBinary).
func writeDist(ctx context.Context, platforms []ociimage.Platform, version, binDir, distDir string) error {
	root, err := filepath.Abs(".")
	if err != nil {
		return err
	}
	var archives []string
	for _, p := range platforms {
		dir := filepath.Join(binDir, p.OS+"_"+p.Architecture)
		kubevol := filepath.Join(dir, "kubevol")
		if _, err := os.Stat(kubevol); err != nil {
			return fmt.Errorf("%s: build it first (make binaries): %w", kubevol, err)
		}
		cluster := filepath.Join(dir, localcluster.ShippedName)
		start := time.Now()
		err := localcluster.BuildRelease(ctx, root, cluster, kubevolimages.GoBuildEnv(p),
			kubevolimages.GoBuildFlags(version, localcluster.UpstreamLDFlags), os.Stdout)
		if err != nil {
			return err
		}
		fmt.Printf("built %s in %s\n", cluster, time.Since(start).Round(time.Second))
		// This machine's binaries run here: both must say they are of this release, as
		// kubevol up checks (a kubevol built by another make run would not be).
		if p.OS == runtime.GOOS && p.Architecture == runtime.GOARCH {
			if _, err := localcluster.CheckBinary(ctx, cluster, version); err != nil {
				return err
			}
			out, err := exec.CommandContext(ctx, kubevol, "version").Output()
			if f := strings.Fields(string(out)); err != nil || len(f) < 2 || f[1] != version {
				return fmt.Errorf("%s version: %q, %v; want kubevol %s (make binaries VERSION=%s)", kubevol, out, err, version, version)
			}
		}
		out, err := dist.WriteArchive(distDir, dist.Name(version, p.OS, p.Architecture), []dist.File{
			{Name: "kubevol", Src: kubevol, Mode: 0o755},
			{Name: localcluster.ShippedName, Src: cluster, Mode: 0o755},
			{Name: "LICENSE", Src: filepath.Join(root, "LICENSE"), Mode: 0o644},
		})
		if err != nil {
			return err
		}
		st, err := os.Stat(out)
		if err != nil {
			return err
		}
		fmt.Printf("%s %.1f MiB\n", out, float64(st.Size())/(1<<20))
		archives = append(archives, filepath.Base(out))
	}
	sums, err := dist.WriteSums(distDir, archives)
	if err != nil {
		return err
	}
	fmt.Printf("%s:\n%s", filepath.Join(distDir, dist.SumsFile), sums)
	return nil
}
