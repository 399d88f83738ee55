package resizer

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/retry"

	"github.com/kubevol/kubevol/internal/testing/csitest"
)

const (
	driverName = "fake.csi.kubevol.io"
	ns         = "default"
)

// fakeDriver adds ControllerExpandVolume, which csitest.Driver lacks, with recorded requests
// and a replaceable answer; the embedded driver answers the rest.
type fakeDriver struct {
	*csitest.Driver

	mu      sync.Mutex
	reqs    []*csi.ControllerExpandVolumeRequest
	respond func(*csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error)
}

func newFakeDriver(caps ...csi.ControllerServiceCapability_RPC_Type) *fakeDriver {
	if caps == nil {
		caps = []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, expandCapability}
	}
	return &fakeDriver{Driver: &csitest.Driver{Name: driverName, ControllerCaps: caps}}
}

func (d *fakeDriver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	respond := d.respond
	d.mu.Unlock()
	if respond != nil {
		return respond(req)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

func (d *fakeDriver) setRespond(f func(*csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.respond = f
}

func (d *fakeDriver) requests() []*csi.ControllerExpandVolumeRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.reqs)
}

type env struct {
	t   *testing.T
	ctx context.Context
	cs  *fake.Clientset
	drv *fakeDriver
	// c is the running controller, nil in a syncEnv's env.
	c *Controller
}

// waitFor polls cond until it holds.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		e.t.Fatalf("%s never happened", what)
	}
}

// volume returns a bound claim of size capacity that requests request, and its PV.
func volume(name, driver, capacity, request string, mutate func(*corev1.PersistentVolume)) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	uid := types.UID("uid-" + name)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid, ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}},
			VolumeName:  "pv-" + name,
		},
		Status: corev1.PersistentVolumeClaimStatus{
			Phase:       corev1.ClaimBound,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)},
		},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name, ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:     corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)},
			AccessModes:  []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:     &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: uid},
			MountOptions: []string{"noatime"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "vol-" + name, FSType: "ext4",
			}},
		},
	}
	if mutate != nil {
		mutate(pv)
	}
	return pvc, pv
}

func gi(n int64) int64 { return n << 30 }

func (e *env) claim(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pvc
}

// waitClaim polls the claim until cond holds.
func (e *env) waitClaim(name, what string, cond func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	var last *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		last = e.claim(name)
		return cond(last), nil
	})
	if err != nil {
		e.t.Fatalf("claim %s never %s; status: %+v; events: %v", name, what, last.Status, e.events(name))
	}
	return last
}

func (e *env) pvSize(name string) int64 {
	e.t.Helper()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	q := pv.Spec.Capacity[corev1.ResourceStorage]
	return q.Value()
}

// events returns "reason: message" of the claim's events.
func (e *env) events(name string) []string {
	list, err := e.cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out
}

func (e *env) setRequest(name, size string) {
	e.t.Helper()
	// As kubectl edit does, the user's change is made again on a conflict: the resizer may
	// have written the claim's status between the read and the update.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc := e.claim(name)
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
		_, err := e.cs.CoreV1().PersistentVolumeClaims(ns).Update(e.ctx, pvc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func storageQ(l corev1.ResourceList) int64 {
	q := l[corev1.ResourceStorage]
	return q.Value()
}

func resizeStatus(pvc *corev1.PersistentVolumeClaim) corev1.ClaimResourceStatus {
	return pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
}

func condition(pvc *corev1.PersistentVolumeClaim, t corev1.PersistentVolumeClaimConditionType) *corev1.PersistentVolumeClaimCondition {
	for i := range pvc.Status.Conditions {
		if pvc.Status.Conditions[i].Type == t {
			return &pvc.Status.Conditions[i]
		}
	}
	return nil
}

func TestExpandFinishedByController(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "2Gi", func(pv *corev1.PersistentVolume) {
		pv.Spec.CSI.ControllerExpandSecretRef = &corev1.SecretReference{Name: "expand", Namespace: "secrets"}
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "expand", Namespace: "secrets"}, Data: map[string][]byte{"token": []byte("t0ken")}}
	// A condition the resizer does not own must survive its writes.
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimVolumeModifyingVolume, Status: corev1.ConditionTrue}}
	e := newSyncEnv(t, &modifyDriver{fakeDriver: newFakeDriver()}, Config{HandleVolumeInUseError: true}, pvc, pv, secret)

	got := e.syncUntil("data", "reached 2Gi", 1, func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
	if s := resizeStatus(got); s != "" {
		t.Errorf("allocatedResourceStatuses[storage] = %q after a finished expansion, want none", s)
	}
	if a := storageQ(got.Status.AllocatedResources); a != gi(2) {
		t.Errorf("allocatedResources[storage] = %d, want %d", a, gi(2))
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != corev1.PersistentVolumeClaimVolumeModifyingVolume {
		t.Errorf("conditions = %+v, want only the foreign ModifyingVolume one", got.Status.Conditions)
	}
	if s := e.pvSize("pv-data"); s != gi(2) {
		t.Errorf("PV capacity = %d, want %d", s, gi(2))
	}
	reqs := e.drv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d ControllerExpandVolume calls, want 1", len(reqs))
	}
	r := reqs[0]
	mount := r.GetVolumeCapability().GetMount()
	if r.GetVolumeId() != "vol-data" || r.GetCapacityRange().GetRequiredBytes() != gi(2) || r.GetSecrets()["token"] != "t0ken" ||
		mount.GetFsType() != "ext4" || !slices.Equal(mount.GetMountFlags(), []string{"noatime"}) ||
		r.GetVolumeCapability().GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("request = %v", r)
	}
	e.sawEvent(reasonResizing, "pv-data")
	e.sawEvent(reasonSucceeded, "2Gi")
}

func TestExpandNeedsNode(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	pvc, pv := volume("raw", driverName, "1Gi", "3Gi", func(pv *corev1.PersistentVolume) { pv.Spec.VolumeMode = &block })
	drv := newFakeDriver()
	// No capacity in the reply: the requested size is taken.
	drv.setRespond(func(*csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
		return &csi.ControllerExpandVolumeResponse{NodeExpansionRequired: true}, nil
	})
	e := newSyncEnv(t, &modifyDriver{fakeDriver: drv}, Config{HandleVolumeInUseError: true}, pvc, pv)

	got := e.syncUntil("raw", "NodeResizePending", 1, func(c *corev1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == corev1.PersistentVolumeClaimNodeResizePending
	})
	cond := condition(got, corev1.PersistentVolumeClaimFileSystemResizePending)
	if cond == nil || cond.Status != corev1.ConditionTrue || cond.Message != fsResizePendingMessage {
		t.Errorf("FileSystemResizePending condition = %+v", cond)
	}
	if condition(got, corev1.PersistentVolumeClaimResizing) != nil {
		t.Error("the Resizing condition stayed after the controller's part ended")
	}
	if c := storageQ(got.Status.Capacity); c != gi(1) {
		t.Errorf("status.capacity = %d, want it unchanged (%d) until the node expands", c, gi(1))
	}
	if a := storageQ(got.Status.AllocatedResources); a != gi(3) {
		t.Errorf("allocatedResources = %d, want %d", a, gi(3))
	}
	if s := e.pvSize("pv-raw"); s != gi(3) {
		t.Errorf("PV capacity = %d, want %d", s, gi(3))
	}
	if reqs := e.drv.requests(); len(reqs) != 1 || reqs[0].GetVolumeCapability().GetBlock() == nil {
		t.Errorf("want one ControllerExpandVolume with a block capability, got %v", reqs)
	}
	e.sawEvent(reasonFSResizeNeeded, "node")
}

func TestTrivialResizer(t *testing.T) {
	pvc, pv := volume("nodeonly", driverName, "1Gi", "2Gi", nil)
	e := newSyncEnv(t, &modifyDriver{fakeDriver: newFakeDriver(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)}, Config{HandleVolumeInUseError: true}, pvc, pv)

	got := e.syncUntil("nodeonly", "NodeResizePending", 1, func(c *corev1.PersistentVolumeClaim) bool {
		return resizeStatus(c) == corev1.PersistentVolumeClaimNodeResizePending
	})
	if condition(got, corev1.PersistentVolumeClaimFileSystemResizePending) == nil {
		t.Error("no FileSystemResizePending condition")
	}
	if s := e.pvSize("pv-nodeonly"); s != gi(2) {
		t.Errorf("PV capacity = %d, want %d", s, gi(2))
	}
	if n := len(e.drv.requests()); n != 0 {
		t.Errorf("%d ControllerExpandVolume calls to a driver without EXPAND_VOLUME", n)
	}
}

func TestFailureStatuses(t *testing.T) {
	for _, tc := range []struct {
		code       codes.Code
		wantStatus corev1.ClaimResourceStatus
		wantCond   bool // ControllerResizeError
	}{
		{codes.InvalidArgument, corev1.PersistentVolumeClaimControllerResizeInfeasible, true},
		{codes.OutOfRange, corev1.PersistentVolumeClaimControllerResizeInfeasible, true},
		{codes.NotFound, corev1.PersistentVolumeClaimControllerResizeInfeasible, true},
		{codes.Internal, corev1.PersistentVolumeClaimControllerResizeInProgress, true},
		{codes.DeadlineExceeded, corev1.PersistentVolumeClaimControllerResizeInProgress, false},
		{codes.Unavailable, corev1.PersistentVolumeClaimControllerResizeInProgress, false},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			pvc, pv := volume("fail", driverName, "1Gi", "2Gi", nil)
			drv := newFakeDriver()
			drv.setRespond(func(*csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
				return nil, status.Error(tc.code, "backend says no")
			})
			e := newSyncEnv(t, &modifyDriver{fakeDriver: drv}, Config{HandleVolumeInUseError: true}, pvc, pv)
			// Retried with backoff, whatever the error: each sync fails, and each calls.
			for try := 1; try <= 3; try++ {
				if err := e.expand("fail"); err == nil {
					t.Fatalf("sync %d of a failed expansion succeeded: it would not be retried", try)
				}
				if n := len(drv.requests()); n != try {
					t.Fatalf("%d ControllerExpandVolume calls after %d syncs", n, try)
				}
			}
			e.sawEvent(reasonFailed, "backend says no")
			got := e.claim("fail")
			if resizeStatus(got) != tc.wantStatus || (condition(got, corev1.PersistentVolumeClaimControllerResizeError) != nil) != tc.wantCond {
				t.Fatalf("status %+v, want %q and ControllerResizeError %v", got.Status, tc.wantStatus, tc.wantCond)
			}
			if a := storageQ(got.Status.AllocatedResources); a != gi(2) {
				t.Errorf("allocatedResources = %d, want %d", a, gi(2))
			}
			if c := condition(got, corev1.PersistentVolumeClaimControllerResizeError); c != nil && !strings.Contains(c.Message, "backend says no") {
				t.Errorf("ControllerResizeError message %q lacks the driver's error", c.Message)
			}
			if c := storageQ(got.Status.Capacity); c != gi(1) {
				t.Errorf("status.capacity changed to %d on failure", c)
			}
			if s := e.pvSize("pv-fail"); s != gi(1) {
				t.Errorf("PV capacity changed to %d on failure", s)
			}
		})
	}
}

// After a final error the user may lower the request (not below status.capacity) and the
// volume is expanded to the new request; after an uncertain one the size that may be in
// flight must be finished first.
func TestRecoverFromFailure(t *testing.T) {
	for _, tc := range []struct {
		code     codes.Code
		wantSize int64
	}{
		{codes.OutOfRange, gi(3)},
		{codes.Unavailable, gi(10)},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			pvc, pv := volume("big", driverName, "1Gi", "10Gi", nil)
			drv := newFakeDriver()
			// The backend has room for 3Gi.
			drv.setRespond(func(req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
				if req.GetCapacityRange().GetRequiredBytes() > gi(3) {
					return nil, status.Error(tc.code, "no room")
				}
				return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
			})
			e := newSyncEnv(t, &modifyDriver{fakeDriver: drv}, Config{HandleVolumeInUseError: true}, pvc, pv)
			if err := e.expand("big"); err == nil {
				t.Fatal("the sync of a failed expansion succeeded")
			}
			e.sawEvent(reasonFailed, "no room")
			e.setRequest("big", "3Gi")

			if tc.wantSize == gi(10) {
				// Calls keep asking for 10Gi, never for the lowered request, until the driver
				// gives a final answer for them: here, success.
				calls := len(drv.requests())
				for range 3 {
					if err := e.expand("big"); err == nil {
						t.Fatal("the uncertain expansion's retry succeeded while the driver says no")
					}
				}
				if n := len(drv.requests()); n != calls+3 {
					t.Fatalf("%d calls in 3 retries of the uncertain expansion", n-calls)
				}
				drv.setRespond(nil)
			}
			got := e.syncUntil("big", "finished", 1, func(c *corev1.PersistentVolumeClaim) bool {
				return resizeStatus(c) == "" && storageQ(c.Status.Capacity) > gi(1)
			})
			if c := storageQ(got.Status.Capacity); c != tc.wantSize {
				t.Errorf("status.capacity = %d, want %d", c, tc.wantSize)
			}
			if a := storageQ(got.Status.AllocatedResources); a != tc.wantSize {
				t.Errorf("allocatedResources = %d, want %d", a, tc.wantSize)
			}
			if s := e.pvSize("pv-big"); s != tc.wantSize {
				t.Errorf("PV capacity = %d, want %d", s, tc.wantSize)
			}
			if condition(got, corev1.PersistentVolumeClaimControllerResizeError) != nil {
				t.Error("ControllerResizeError stayed after the expansion succeeded")
			}
			for _, r := range drv.requests() {
				if b := r.GetCapacityRange().GetRequiredBytes(); b != gi(10) && b != tc.wantSize {
					t.Errorf("ControllerExpandVolume asked for %d bytes", b)
				}
			}
		})
	}
}

func TestInUseWaitsForPod(t *testing.T) {
	pod := func(phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
			Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "used"}}}}},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	// Upstream calls the driver first, whatever its VolumeExpansion plugin capability,
	// which is optional: many drivers advertise neither ONLINE nor OFFLINE and expand in use.
	t.Run("driver without a VolumeExpansion capability", func(t *testing.T) {
		pvc, pv := volume("used", driverName, "1Gi", "2Gi", nil)
		e := newSyncEnv(t, &modifyDriver{fakeDriver: newFakeDriver()}, Config{HandleVolumeInUseError: true}, pvc, pv, pod(corev1.PodRunning))
		e.syncUntil("used", "expanded while a pod uses it", 1, func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
	})
	t.Run("driver refuses in use", func(t *testing.T) {
		pvc, pv := volume("used", driverName, "1Gi", "2Gi", nil)
		drv := newFakeDriver()
		drv.setRespond(func(*csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, "volume is published")
		})
		e := newSyncEnv(t, &modifyDriver{fakeDriver: drv}, Config{HandleVolumeInUseError: true}, pvc, pv, pod(corev1.PodRunning))
		if err := e.expand("used"); err == nil {
			t.Fatal("the sync of a refused expansion succeeded")
		}
		// Held back while the pod runs: the retry does not call the driver, and says why.
		_ = e.expand("used")
		e.sawEvent(reasonFailed, "in use by pod default/app")
		if n := len(e.drv.requests()); n != 1 {
			t.Fatalf("%d ControllerExpandVolume calls before the resizer held back, want the one that was refused", n)
		}
		if condition(e.claim("used"), corev1.PersistentVolumeClaimControllerResizeError) == nil {
			t.Error("no ControllerResizeError condition after FAILED_PRECONDITION")
		}
		drv.setRespond(nil)
		if err := e.cs.CoreV1().Pods(ns).Delete(e.ctx, "app", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.syncUntil("used", "expanded once the pod was gone", 1, func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
		if n := len(e.drv.requests()); n != 2 {
			t.Errorf("%d ControllerExpandVolume calls, want 2: refused, then done once no pod used the volume", n)
		}
	})
	t.Run("finished pod", func(t *testing.T) {
		pvc, pv := volume("used", driverName, "1Gi", "2Gi", nil)
		e := newSyncEnv(t, &modifyDriver{fakeDriver: newFakeDriver()}, Config{HandleVolumeInUseError: true}, pvc, pv, pod(corev1.PodSucceeded))
		e.syncUntil("used", "expanded", 1, func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
	})
	t.Run("online driver", func(t *testing.T) {
		pvc, pv := volume("used", driverName, "1Gi", "2Gi", nil)
		drv := newFakeDriver()
		drv.OnlineExpansion = true
		e := newSyncEnv(t, &modifyDriver{fakeDriver: drv}, Config{HandleVolumeInUseError: true}, pvc, pv, pod(corev1.PodRunning))
		e.syncUntil("used", "expanded", 1, func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
	})
}

func TestOtherClaimsIgnored(t *testing.T) {
	mine, myPV := volume("mine", driverName, "1Gi", "2Gi", nil)
	theirs, theirPV := volume("theirs", "other.csi.example.com", "1Gi", "2Gi", nil)
	annotated, annotatedPV := volume("annotated", driverName, "1Gi", "2Gi", nil)
	annotated.Annotations = map[string]string{AnnStorageResizer: "other.csi.example.com"}
	stranger, strangerPV := volume("stranger", driverName, "1Gi", "2Gi", nil)
	strangerPV.Spec.ClaimRef.UID = "uid-of-a-deleted-claim"
	pending, pendingPV := volume("pending", driverName, "1Gi", "2Gi", nil)
	pending.Status.Phase = corev1.ClaimPending
	e := newSyncEnv(t, &modifyDriver{fakeDriver: newFakeDriver()}, Config{HandleVolumeInUseError: true}, mine, myPV, theirs, theirPV, annotated, annotatedPV, stranger, strangerPV, pending, pendingPV)

	// The controller works: its own claim gets expanded.
	e.syncUntil("mine", "expanded", 1, func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
	for _, name := range []string{"theirs", "annotated", "stranger", "pending"} {
		if err := e.expand(name); err != nil {
			t.Errorf("sync of claim %s: %v", name, err)
		}
		c := e.claim(name)
		if c.Status.AllocatedResources != nil || c.Status.AllocatedResourceStatuses != nil || len(c.Status.Conditions) > 0 {
			t.Errorf("claim %s was touched: %+v", name, c.Status)
		}
		if s := e.pvSize("pv-" + name); s != gi(1) {
			t.Errorf("PV of claim %s grew to %d", name, s)
		}
	}
	if reqs := e.drv.requests(); len(reqs) != 1 || reqs[0].GetVolumeId() != "vol-mine" {
		var ids []string
		for _, r := range reqs {
			ids = append(ids, r.GetVolumeId())
		}
		t.Errorf("ControllerExpandVolume calls for %v, want only vol-mine", ids)
	}
}

func TestLeaseNameMatchesUpstream(t *testing.T) {
	if got := LeaseName("local.kubevol.io"); got != "external-resizer-local-kubevol-io" {
		t.Errorf("LeaseName = %q", got)
	}
}

// Status writes of the resizer itself must not wake the claim (that would bypass the
// backoff); spec changes, new capacity and periodic resyncs must.
func TestClaimChanged(t *testing.T) {
	base, _ := volume("c", driverName, "1Gi", "2Gi", nil)
	next := func(f func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := base.DeepCopy()
		c.ResourceVersion = "2"
		f(c)
		return c
	}
	for name, tc := range map[string]struct {
		cur  *corev1.PersistentVolumeClaim
		want bool
	}{
		"resync": {base.DeepCopy(), true},
		"own status write": {next(func(c *corev1.PersistentVolumeClaim) {
			c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInfeasible}
			c.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimControllerResizeError, Status: corev1.ConditionTrue}}
		}), false},
		"request lowered": {next(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("1500Mi")
		}), true},
		"capacity grew": {next(func(c *corev1.PersistentVolumeClaim) {
			c.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}), true},
		"resizer annotated": {next(func(c *corev1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{AnnStorageResizer: driverName}
		}), true},
		"node gave up": {next(func(c *corev1.PersistentVolumeClaim) {
			c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizeInfeasible}
		}), true},
	} {
		if got := claimChanged(base, tc.cur); got != tc.want {
			t.Errorf("%s: claimChanged = %v, want %v", name, got, tc.want)
		}
	}
}

// After the node found the size infeasible, the controller does not re-arm the node for the
// same size (it would only fail again); a changed request starts a new round.
func TestNodeInfeasibleWaitsForANewRequest(t *testing.T) {
	c := &Controller{}
	for _, tc := range []struct {
		request string
		want    bool
	}{{"2Gi", false}, {"3Gi", true}} {
		pvc, pv := volume("v", driverName, "1Gi", tc.request, nil)
		pv.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("2Gi")
		pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
		pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
			corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizeInfeasible}
		size, ok := c.target(ns+"/v", pvc, pv)
		if ok != tc.want || (ok && size.String() != tc.request) {
			t.Errorf("request %s: target = %s, %v; want %s, %v", tc.request, size.String(), ok, tc.request, tc.want)
		}
	}
}

// A request CSI cannot carry is infeasible without a call: Value() would send it wrapped,
// zeroed or saturated. A driver that expands only on the node does not get the PV grown to
// it either. Lowering the request recovers.
func TestRequestBeyondCSIIsInfeasible(t *testing.T) {
	for _, expands := range []bool{true, false} {
		for _, request := range []string{"8Ei", "1e30", "9223372036854775808", "123456789012345678901234567890"} {
			t.Run(request+"/controller="+strconv.FormatBool(expands), func(t *testing.T) {
				pvc, pv := volume("huge", driverName, "1Gi", request, nil)
				drv := newFakeDriver()
				if !expands {
					drv = newFakeDriver(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
				}
				e := newSyncEnv(t, &modifyDriver{fakeDriver: drv}, Config{HandleVolumeInUseError: true}, pvc, pv)
				got := e.syncUntil("huge", "infeasible", 1, func(c *corev1.PersistentVolumeClaim) bool {
					return resizeStatus(c) == corev1.PersistentVolumeClaimControllerResizeInfeasible
				})
				e.sawEvent(reasonFailed, "the largest size a CSI volume can have (9223372036854775807 bytes)")
				if c := condition(got, corev1.PersistentVolumeClaimControllerResizeError); c == nil || !strings.Contains(c.Message, "largest size") {
					t.Errorf("ControllerResizeError condition = %+v", c)
				}
				if n := len(drv.requests()); n != 0 {
					t.Errorf("%d ControllerExpandVolume calls for %s", n, request)
				}
				if s := e.pvSize("pv-huge"); s != gi(1) {
					t.Errorf("PV capacity changed to %d", s)
				}
				e.setRequest("huge", "2Gi")
				e.syncUntil("huge", "expanded after the request was lowered", 1, func(c *corev1.PersistentVolumeClaim) bool {
					return e.pvSize("pv-huge") == gi(2) && resizeStatus(c) != corev1.PersistentVolumeClaimControllerResizeInfeasible
				})
			})
		}
	}
}
