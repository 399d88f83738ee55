package csi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/pkg/volume"
)

// fakeNode is a CSI node service that records its requests.
type fakeNode struct {
	csipb.UnimplementedNodeServer
	mu    sync.Mutex
	calls []any
}

func (f *fakeNode) record(req any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req)
}

func (f *fakeNode) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	f.record(req)
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (f *fakeNode) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	f.record(req)
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (f *fakeNode) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	f.record(req)
	if req.GetVolumeCapability().GetBlock() != nil {
		return &csipb.NodePublishVolumeResponse{}, os.WriteFile(req.TargetPath, nil, 0o640)
	}
	return &csipb.NodePublishVolumeResponse{}, os.MkdirAll(req.TargetPath, 0o750)
}

func (f *fakeNode) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	f.record(req)
	return &csipb.NodeUnpublishVolumeResponse{}, os.Remove(req.TargetPath)
}

func (f *fakeNode) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	f.record(req)
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

func (f *fakeNode) taken() []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

// fakeDrivers serves fakeNode as driver "d.example.com" with STAGE_UNSTAGE_VOLUME and
// EXPAND_VOLUME.
type fakeDrivers struct{ client csipb.NodeClient }

func (d *fakeDrivers) Node(context.Context, string) (csipb.NodeClient, map[csipb.NodeServiceCapability_RPC_Type]bool, error) {
	return d.client, map[csipb.NodeServiceCapability_RPC_Type]bool{csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME: true, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME: true}, nil
}

type fixture struct {
	plugin  *csiPlugin
	node    *fakeNode
	mounter *mount.FakeMounter
	root    string
	client  *fake.Clientset
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fn := &fakeNode{}
	csipb.RegisterNodeServer(srv, fn)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })

	f := &fixture{node: fn, mounter: mount.NewFakeMounter(nil), root: t.TempDir(), client: fake.NewClientset(objs...)}
	pm := volume.NewPluginManager(volume.HostConfig{
		Paths: volume.Paths{Root: f.root}, NodeName: "n1", Mounter: f.mounter, KubeClient: f.client,
		TokenGetter: func(_ context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			out := req.DeepCopy()
			out.Status.Token = "token-of-" + ns + "/" + sa + "-for-" + req.Spec.BoundObjectRef.Name
			return out, nil
		},
		SecretFetcher: func(ctx context.Context, ns, name string) (*v1.Secret, error) {
			return f.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		},
		AttachmentGetter: func(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
			return f.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		},
	})
	// A node may only GET VolumeAttachments and Secrets: any list or watch fails the test.
	f.client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if v := a.GetVerb(); v == "list" || v == "watch" {
			t.Errorf("%s of %s: a node may not", v, a.GetResource().Resource)
		}
		return false, nil, nil
	})
	f.plugin = New(Config{Drivers: &fakeDrivers{client: csipb.NewNodeClient(cc)}}).(*csiPlugin)
	if err := pm.Register(f.plugin); err != nil {
		t.Fatal(err)
	}
	return f
}

func pvSpec() *volume.Spec {
	return volume.SpecFromPersistentVolume(&v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv1"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:  []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			MountOptions: []string{"noatime"},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: "d.example.com", VolumeHandle: "vol-1", FSType: "ext4",
				VolumeAttributes:     map[string]string{"k": "v"},
				NodePublishSecretRef: &v1.SecretReference{Namespace: "ns", Name: "pub"},
			}},
		},
	}, true)
}

func testPod() *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}, Spec: v1.PodSpec{ServiceAccountName: "sa"}}
}

func TestCanAttachFollowsCSIDriver(t *testing.T) {
	no := false
	for _, tc := range []struct {
		objs []runtime.Object
		want bool
	}{
		{nil, true}, // no CSIDriver: attach, as upstream
		{[]runtime.Object{&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}}}, true},
		{[]runtime.Object{&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}}, false},
	} {
		f := newFixture(t, tc.objs...)
		if got, err := f.plugin.CanAttach(pvSpec()); err != nil || got != tc.want {
			t.Errorf("CanAttach with %v = %v, %v; want %v", tc.objs, got, err, tc.want)
		}
	}
}

// WaitForAttach returns once the attacher marks the VolumeAttachment attached, learnt by
// GETs: a Forbidden (the node graph lagging) and a not-yet-attached object are waited out.
func TestWaitForAttach(t *testing.T) {
	name := AttachmentName("vol-1", "d.example.com", "n1")
	f := newFixture(t, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}})
	var refused atomic.Int32
	f.client.PrependReactor("get", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused.Add(1) <= 2 {
			return true, nil, apierrors.NewForbidden(storagev1.Resource("volumeattachments"), name, errors.New("no relationship found"))
		}
		return false, nil, nil
	})
	a, _ := f.plugin.NewAttacher()
	done := make(chan error, 1)
	go func() {
		got, err := a.WaitForAttach(context.Background(), pvSpec(), "", testPod())
		if err == nil && got != name {
			t.Errorf("device path = %q, want %q", got, name)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the watch start; the result does not depend on it
	attachAndWait(t, f, name, done)
}

// attachAndWait marks the VolumeAttachment name attached, as a fresh object, and waits for
// the WaitForAttach that reports to done.
func attachAndWait(t *testing.T, f *fixture, name string, done <-chan error) {
	t.Helper()
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: storagev1.VolumeAttachmentStatus{Attached: true}}
	if _, err := f.client.StorageV1().VolumeAttachments().Update(context.Background(), va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitForAttach did not see the attach")
	}
}

// A VolumeAttachment being deleted is a detach for a pod that left, even while it still says
// attached: the node waits for the one the attach/detach controller creates again.
func TestWaitForAttachOutlastsDetach(t *testing.T) {
	name := AttachmentName("vol-1", "d.example.com", "n1")
	now := metav1.Now()
	f := newFixture(t, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name, DeletionTimestamp: &now, Finalizers: []string{"external-attacher/d-example-com"}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true}})
	a, _ := f.plugin.NewAttacher()
	done := make(chan error, 1)
	go func() {
		_, err := a.WaitForAttach(context.Background(), pvSpec(), "", testPod())
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("WaitForAttach returned %v for a VolumeAttachment being deleted", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := f.plugin.publishContext(context.Background(), pvSpec(), mustSource(t, pvSpec())); err == nil {
		t.Error("publishContext of a VolumeAttachment being deleted succeeded")
	}
	attachAndWait(t, f, name, done)
}

// Stage, publish with pod info and secrets, unpublish and unstage, in the kubelet's paths
// and vol_data.json format.
func TestStagePublishTearDown(t *testing.T) {
	yes, no := true, false
	ctx := context.Background()
	f := newFixture(t,
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no, PodInfoOnMount: &yes}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pub"}, Data: map[string][]byte{"token": []byte("s3cret")}},
	)
	spec := pvSpec()
	if name, _ := f.plugin.VolumeName(spec); name != "d.example.com^vol-1" {
		t.Errorf("VolumeName = %q", name)
	}
	dm, _ := f.plugin.NewDeviceMounter()
	staging, _ := dm.DeviceMountPath(spec)
	wantStaging := filepath.Join(f.root, "plugins/kubernetes.io/csi/d.example.com", "d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49", "globalmount")
	if staging != wantStaging {
		t.Errorf("staging path = %s", staging)
	}
	if err := dm.MountDevice(ctx, spec, "", staging, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	stage := f.node.taken()[0].(*csipb.NodeStageVolumeRequest)
	if stage.StagingTargetPath != staging || stage.VolumeCapability.GetMount().GetFsType() != "ext4" || stage.VolumeCapability.GetMount().GetMountFlags()[0] != "noatime" {
		t.Errorf("NodeStage request = %v", stage)
	}

	m, err := f.plugin.NewMounter(spec, testPod())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUp(ctx, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	wantTarget := filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~csi/pv1/mount")
	pub := f.node.taken()[0].(*csipb.NodePublishVolumeRequest)
	if pub.TargetPath != wantTarget || pub.StagingTargetPath != staging || !pub.Readonly || pub.Secrets["token"] != "s3cret" {
		t.Errorf("NodePublish request: target %s staging %s readonly %v", pub.TargetPath, pub.StagingTargetPath, pub.Readonly)
	}
	for k, v := range map[string]string{podNameKey: "p", podNamespaceKey: "ns", podUIDKey: "uid-1", serviceAccountKey: "sa", ephemeralKey: "false", "k": "v"} {
		if pub.VolumeContext[k] != v {
			t.Errorf("volume context %s = %q, want %q", k, pub.VolumeContext[k], v)
		}
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(wantTarget), "vol_data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]string
	_ = json.Unmarshal(raw, &data)
	if data["driverName"] != "d.example.com" || data["volumeHandle"] != "vol-1" || data["specVolumeID"] != "pv1" || data["volumeLifecycleMode"] != "Persistent" {
		t.Errorf("vol_data.json = %s", raw)
	}

	// Reconstruction reads it back.
	re, err := f.plugin.ConstructVolumeSpec("pv1", filepath.Dir(wantTarget))
	if err != nil || re.PersistentVolume.Spec.CSI.VolumeHandle != "vol-1" {
		t.Errorf("ConstructVolumeSpec = %+v, %v", re, err)
	}

	u, _ := f.plugin.NewUnmounter("pv1", "uid-1")
	if err := u.TearDown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.node.taken()[0].(*csipb.NodeUnpublishVolumeRequest); !ok {
		t.Error("TearDown did not call NodeUnpublishVolume")
	}
	if _, err := os.Stat(filepath.Dir(wantTarget)); !os.IsNotExist(err) {
		t.Errorf("volume directory left: %v", err)
	}
	du, _ := f.plugin.NewDeviceUnmounter()
	if err := du.UnmountDevice(ctx, staging); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.node.taken()[0].(*csipb.NodeUnstageVolumeRequest); !ok {
		t.Error("UnmountDevice did not call NodeUnstageVolume")
	}
	if _, err := os.Stat(filepath.Dir(staging)); !os.IsNotExist(err) {
		t.Errorf("staging directory left: %v", err)
	}
}

// After a restart every device is uncertain: a staging path still mounted, with its
// vol_data.json, is not staged a second time.
func TestMountDeviceSkipsWhatIsStaged(t *testing.T) {
	f := newFixture(t)
	spec := pvSpec()
	dm, _ := f.plugin.NewDeviceMounter()
	staging, _ := dm.DeviceMountPath(spec)
	if err := writeVolData(filepath.Dir(staging), volData{DriverName: "d.example.com", VolumeHandle: "vol-1"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	f.mounter.MountPoints = append(f.mounter.MountPoints, mount.MountPoint{Device: "/dev/loop9", Path: staging, Type: "ext4"})
	if err := dm.MountDevice(context.Background(), spec, "", staging, volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	if calls := f.node.taken(); len(calls) != 0 {
		t.Errorf("calls = %v, want no NodeStage", calls)
	}
}

// CSIDriver.tokenRequests: a token of the pod's service account, bound to the pod, per
// audience, in the volume context; with serviceAccountTokenInSecrets, in the secrets only,
// beside the node-publish secret's data.
func TestServiceAccountTokens(t *testing.T) {
	for name, inSecrets := range map[string]*bool{"unset": nil, "false": ptrTo(false), "true": ptrTo(true)} {
		t.Run(name, func(t *testing.T) {
			no := false
			f := newFixture(t, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{
				AttachRequired: &no, TokenRequests: []storagev1.TokenRequest{{Audience: "vault"}}, ServiceAccountTokenInSecrets: inSecrets,
			}}, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pub"}, Data: map[string][]byte{"key": []byte("s3cret")}})
			m, err := f.plugin.NewMounter(pvSpec(), testPod())
			if err != nil {
				t.Fatal(err)
			}
			if err := m.SetUp(context.Background(), volume.MounterArgs{}); err != nil {
				t.Fatal(err)
			}
			pub := f.node.taken()[0].(*csipb.NodePublishVolumeRequest)
			where, other := pub.VolumeContext, pub.Secrets
			if inSecrets != nil && *inSecrets {
				where, other = pub.Secrets, pub.VolumeContext
			}
			if _, ok := other[tokensKey]; ok {
				t.Errorf("tokens are in both the volume context and the secrets")
			}
			var tokens map[string]struct{ Token string }
			if err := json.Unmarshal([]byte(where[tokensKey]), &tokens); err != nil {
				t.Fatalf("%s = %q: %v", tokensKey, where[tokensKey], err)
			}
			if got := tokens["vault"].Token; got != "token-of-ns/sa-for-p" {
				t.Errorf("token for audience vault = %q", got)
			}
			if pub.Secrets["key"] != "s3cret" || pub.VolumeContext["k"] != "v" {
				t.Errorf("secrets %v, volume context %v: the node-publish secret or the attributes are lost", pub.Secrets, pub.VolumeContext)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func mustSource(t *testing.T, spec *volume.Spec) source {
	t.Helper()
	src, err := sourceOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	return src
}
