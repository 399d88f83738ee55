package up

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/build/ociimage"
	"github.com/kubevol/kubevol/internal/cluster/kubeletnode"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/component/driver"
)

// RuntimeContainerd is the --runtime that makes the upstream kubelet on containerd the node.
const RuntimeContainerd = "containerd"

// DefaultVolumeManager is the kubelet's volume manager unless Options.VolumeManager says
// otherwise (docs/up.md says why).
const DefaultVolumeManager = kubeletnode.VolumeManagerKubelet

// runtimeNode is the kubelet node of a stack started with RuntimeContainerd.
type runtimeNode struct {
	node       *kubeletnode.Node
	containerd *component
	kubelet    *component
}

// newRuntimeNode lays out the kubelet node; it starts nothing.
func (s *Stack) newRuntimeNode() (*runtimeNode, error) {
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	node, err := kubeletnode.New(kubeletnode.Options{
		Dir: s.path("runtime"), NodeName: s.opts.NodeName, ClusterBinary: s.Cluster.Binary(), CNIBinDir: s.cniDir,
		CAFile: s.Cluster.PKI().CAFile(), BootstrapKubeconfig: s.path("kubelet-bootstrap.kubeconfig"), Port: ports[0], HealthzPort: ports[1],
		VolumeManager: cmp.Or(s.opts.VolumeManager, DefaultVolumeManager),
	})
	if err != nil {
		return nil, err
	}
	return &runtimeNode{node: node}, nil
}

// startRuntimeNode starts containerd, clears what an earlier run may have left in it,
// imports the images, then starts the kubelet and waits until its Node is Ready.
func (s *Stack) startRuntimeNode(ctx context.Context, cs kubernetes.Interface, rn *runtimeNode) error {
	node := rn.node
	if err := s.Cluster.WriteNodeBootstrapKubeconfig(ctx, s.path("kubelet-bootstrap.kubeconfig"), time.Hour); err != nil {
		return err
	}
	// A crashed run may have left shims, mounts or the bridge behind.
	if err := node.Cleanup(); err != nil {
		return fmt.Errorf("clean up an earlier run's node: %w", err)
	}
	if err := node.Prepare(); err != nil {
		return err
	}
	cd := node.Containerd()
	rn.containerd = newComponent(cd.Name, cd.Path, cd.Args, s.Cluster.LogPath(cd.Name), "")
	rn.containerd.check = node.RuntimeReady
	if err := s.startComponent(ctx, rn.containerd, &s.nodeProcs); err != nil {
		return err
	}
	if err := node.RemovePods(ctx); err != nil {
		return fmt.Errorf("remove an earlier run's pods: %w", err)
	}
	if err := s.importImages(ctx, node); err != nil {
		return err
	}
	kl := node.Kubelet()
	rn.kubelet = newComponent(kl.Name, kl.Path, kl.Args, s.Cluster.LogPath(kl.Name), node.HealthURL())
	rn.kubelet.env = kl.Env
	if err := s.startComponent(ctx, rn.kubelet, &s.nodeProcs); err != nil {
		return err
	}
	fmt.Fprintf(s.opts.Progress, "waiting for Node %s to be Ready\n", s.opts.NodeName)
	if err := waitNodeReady(ctx, cs, s.opts.NodeName, 3*time.Minute); err != nil {
		return err
	}
	// Until the kubelet has registered the built-in driver, its CSINode has no topology
	// key, and a claim created at once would fail to provision and wait for a new schedule.
	if err := waitRegistered(ctx, cs, s.opts.NodeName, driver.DefaultDriverName); err != nil {
		return fmt.Errorf("the kubelet did not register driver %s: %w", driver.DefaultDriverName, err)
	}
	return nil
}

// importImages builds the sandbox and test images (once per state directory) and the
// caller's archives, and imports them all.
func (s *Stack) importImages(ctx context.Context, node *kubeletnode.Node) error {
	archive := s.path("runtime", "images", "test-images.tar")
	if _, err := os.Stat(archive); err != nil {
		imgs, err := kubeletnode.TestImages()
		if err != nil {
			return fmt.Errorf("build the sandbox and busybox images: %w", err)
		}
		if err := ociimage.WriteArchiveFile(archive, imgs...); err != nil {
			return err
		}
	}
	archives := []string{archive}
	if s.opts.E2EImages {
		a, err := s.e2eArchives(ctx)
		if err != nil {
			return err
		}
		archives = append(archives, a...)
	}
	start := time.Now()
	for _, a := range append(archives, s.opts.Images...) {
		if err := node.Import(ctx, a); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.opts.Progress, "images imported (%s)\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// e2eArchives are the archives of the e2e suite's agnhost image (agnhost built and cached
// like the control plane), nginx image (Debian's nginx) and glibc-dns-testing image (the
// storage suite's multiVolume pods), written next to the agnhost binary, once per binary.
func (s *Stack) e2eArchives(ctx context.Context) ([]string, error) {
	bin, err := localcluster.EnsureAgnhost(ctx, s.opts.Progress)
	if err != nil {
		return nil, err
	}
	agnhost, err := cachedArchive(bin+".tar", func() ([]ociimage.Named, error) { return kubeletnode.AgnhostImages(bin) })
	if err != nil {
		return nil, fmt.Errorf("agnhost image: %w", err)
	}
	nginx, err := cachedArchive(bin+"-nginx.tar", func() ([]ociimage.Named, error) {
		nb, err := kubeletnode.NginxBinary(ctx, filepath.Dir(bin))
		if err != nil {
			return nil, err
		}
		return kubeletnode.NginxImages(nb)
	})
	if err != nil {
		return nil, fmt.Errorf("nginx image: %w", err)
	}
	glibc, err := cachedArchive(bin+"-glibc-dns-testing-dash-coreutils.tar", kubeletnode.GlibcDNSTestingImages)
	if err != nil {
		return nil, fmt.Errorf("glibc-dns-testing image: %w", err)
	}
	return []string{agnhost, nginx, glibc}, nil
}

// cachedArchive writes the images of build to archive unless it is there already.
func cachedArchive(archive string, build func() ([]ociimage.Named, error)) (string, error) {
	if _, err := os.Stat(archive); err == nil {
		return archive, nil
	}
	imgs, err := build()
	if err != nil {
		return "", err
	}
	return archive, ociimage.WriteArchiveFile(archive, imgs...)
}

func waitNodeReady(ctx context.Context, cs kubernetes.Interface, name string, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = c.Reason + ": " + c.Message
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready after %s: %s", name, timeout, last)
	}
	return nil
}

// stopRuntime takes the node down: the kubelet first, then every sandbox and container
// through containerd's CRI (the CNI plugins release the pods' addresses, veths and network
// namespaces), then containerd, then whatever is left (shims, mounts, the bridge, cgroups).
func (s *Stack) stopRuntime() error {
	s.mu.Lock()
	rn, procs := s.runtime, s.nodeProcs
	s.runtime, s.nodeProcs = nil, nil
	s.mu.Unlock()
	if rn == nil {
		return nil
	}
	var errs []error
	if rn.kubelet != nil {
		errs = append(errs, rn.kubelet.stop(30*time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if rn.containerd != nil && rn.node.RuntimeReady(ctx) == nil {
		errs = append(errs, rn.node.RemovePods(ctx))
	}
	for _, c := range procs {
		errs = append(errs, c.stop(30*time.Second))
	}
	errs = append(errs, rn.node.Cleanup())
	return errors.Join(errs...)
}

// RuntimeNode is the kubelet node of a --runtime containerd stack, or nil.
func (s *Stack) RuntimeNode() *kubeletnode.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runtime == nil {
		return nil
	}
	return s.runtime.node
}
