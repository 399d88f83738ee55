package plugins_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/mount-utils"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kubevol/kubevol/internal/testing/podcertsigner"
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins/emptydir"
	"github.com/kubevol/kubevol/pkg/volume/plugins/projected"
	"github.com/kubevol/kubevol/pkg/volume/podcertificate"
)

// A podCertificate source writes the credential bundle (key, then chain), the key and the
// chain where it says, through the atomic writer; the key is the one of the request the
// signer answered. From beginRefreshAt (plus jitter) on, a remount files a request for a
// new key and replaces all three files in one switch of ..data; teardown forgets the key.
func TestProjectedPodCertificate(t *testing.T) {
	signer, err := podcertsigner.New()
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	var reqs []*certificatesv1.PodCertificateRequest
	root := t.TempDir()
	pm := volume.NewPluginManager(volume.HostConfig{
		Paths: volume.Paths{Root: root}, NodeName: "n1", Mounter: mount.NewFakeMounter(nil),
		PodCertificateCreator: func(_ context.Context, pod *v1.Pod, req *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error) {
			out := req.DeepCopy()
			out.Name = fmt.Sprintf("req-%d", len(reqs))
			if err := signer.Issue(out, clk.Now(), 2*time.Hour, clk.Now().Add(time.Hour)); err != nil {
				return nil, err
			}
			reqs = append(reqs, out)
			return out, nil
		},
		PodCertificateGetter: func(_ context.Context, _, name string) (*certificatesv1.PodCertificateRequest, error) {
			for _, r := range reqs {
				if r.Name == name {
					return r.DeepCopy(), nil
				}
			}
			return nil, fmt.Errorf("no request %s", name)
		},
	})
	cfg := projected.Config{PodCertificates: podcertificate.Config{Clock: clk, Jitter: func() time.Duration { return 2 * time.Minute }}}
	if err := pm.Register(emptydir.New(), projected.NewWithConfig(cfg)); err != nil {
		t.Fatal(err)
	}
	vol := v1.Volume{Name: "certs", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o440)),
		Sources: []v1.VolumeProjection{{PodCertificate: &v1.PodCertificateProjection{
			SignerName: "example.com/s", KeyType: podcertificate.ED25519,
			CredentialBundlePath: "bundle.pem", KeyPath: "tls/key.pem", CertificateChainPath: "tls/chain.pem",
		}}},
	}}}
	pod := testPod(vol)
	spec := volume.SpecFromVolume(&vol)
	p, err := pm.FindBySpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	setUp := func(args volume.MounterArgs) volume.Mounter {
		t.Helper()
		m, err := p.NewMounter(spec, pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetUp(context.Background(), args); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := setUp(volume.MounterArgs{})
	dir := m.Path()
	key1, data1 := checkCredentialFiles(t, dir, reqs[len(reqs)-1])
	if _, mode := readFile(t, filepath.Join(dir, "bundle.pem")); mode != 0o440 {
		t.Errorf("bundle mode %v, want the default mode 0440", mode)
	}
	if d := m.(volume.Refresher).RefreshAfter(); d != time.Hour+2*time.Minute {
		t.Errorf("RefreshAfter = %v, want beginRefreshAt + jitter", d)
	}
	// A remount before the renewal is due writes the same credentials.
	setUp(volume.MounterArgs{})
	if len(reqs) != 1 {
		t.Fatalf("%d requests before the renewal, want 1", len(reqs))
	}
	clk.Step(time.Hour + 2*time.Minute)
	setUp(volume.MounterArgs{FsUser: ptr(int64(os.Getuid()))})
	if len(reqs) != 2 {
		t.Fatalf("%d requests after the renewal, want 2", len(reqs))
	}
	key2, data2 := checkCredentialFiles(t, dir, reqs[1])
	if key2 == key1 || data2 == data1 {
		t.Errorf("renewal: key changed %v, ..data changed %v", key2 != key1, data2 != data1)
	}
	if _, err := os.Stat(filepath.Join(dir, data1)); !os.IsNotExist(err) {
		t.Errorf("the previous timestamped directory is still there: %v", err)
	}
	if _, mode := readFile(t, filepath.Join(dir, "tls/key.pem")); mode != 0o600 {
		t.Errorf("key mode %v, want 0600 with runAsUser", mode)
	}

	u, err := p.NewUnmounter(vol.Name, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.TearDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	setUp(volume.MounterArgs{})
	if len(reqs) != 3 {
		t.Errorf("%d requests after a teardown and a new SetUp, want 3 (the key is forgotten)", len(reqs))
	}
}

// checkCredentialFiles: bundle = key + chain, the chain is the request's, the key is the
// request's; it returns the key file and the target of ..data.
func checkCredentialFiles(t *testing.T, dir string, req *certificatesv1.PodCertificateRequest) (string, string) {
	t.Helper()
	bundle, _ := readFile(t, filepath.Join(dir, "bundle.pem"))
	key, _ := readFile(t, filepath.Join(dir, "tls/key.pem"))
	chain, _ := readFile(t, filepath.Join(dir, "tls/chain.pem"))
	if bundle != key+chain || chain != req.Status.CertificateChain {
		t.Errorf("bundle is not key + chain, or chain is not the issued one:\n%s", bundle)
	}
	if err := podcertsigner.CheckPair([]byte(key), chain, req.Spec.StubPKCS10Request); err != nil {
		t.Error(err)
	}
	data, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	return key, data
}

// With Config.Credentials (a kubelet's pod certificate manager), the plugin files no
// PodCertificateRequest of its own: it writes what the manager has, and again every minute.
func TestProjectedPodCertificateFromHost(t *testing.T) {
	pm := volume.NewPluginManager(volume.HostConfig{
		Paths: volume.Paths{Root: t.TempDir()}, NodeName: "n1", Mounter: mount.NewFakeMounter(nil),
		PodCertificateCreator: func(context.Context, *v1.Pod, *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error) {
			t.Error("the plugin filed a PodCertificateRequest itself")
			return nil, fmt.Errorf("refused")
		},
	})
	var asked []string
	cfg := projected.Config{Credentials: func(_ context.Context, pod *v1.Pod, volume string, index int) ([]byte, []byte, error) {
		asked = append(asked, fmt.Sprintf("%s/%s/%d", pod.Name, volume, index))
		return []byte("KEY\n"), []byte("CHAIN\n"), nil
	}}
	if err := pm.Register(emptydir.New(), projected.NewWithConfig(cfg)); err != nil {
		t.Fatal(err)
	}
	vol := v1.Volume{Name: "certs", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{PodCertificate: &v1.PodCertificateProjection{
			SignerName: "example.com/s", KeyType: podcertificate.ED25519, CredentialBundlePath: "bundle.pem",
		}}},
	}}}
	pod := testPod(vol)
	spec := volume.SpecFromVolume(&vol)
	p, err := pm.FindBySpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.NewMounter(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := readFile(t, filepath.Join(m.Path(), "bundle.pem")); got != "KEY\nCHAIN\n" {
		t.Errorf("bundle %q, want the manager's key then chain", got)
	}
	if len(asked) != 1 || asked[0] != pod.Name+"/certs/0" {
		t.Errorf("asked the manager for %v", asked)
	}
	if d := m.(volume.Refresher).RefreshAfter(); d != time.Minute {
		t.Errorf("RefreshAfter = %v, want a minute", d)
	}
}
