package lifecycle

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// tokenRefusal is how long the injected refusal of a pod's service account token lasts,
// from the first refused request: the refused mount has been retried six times by then.
// Backing off by doubling from 500 ms, as for any failed operation, the seventh attempt
// would come 32 s after the sixth, about 30 s after the refusal ended.
const tokenRefusal = 33 * time.Second

// recoveredWithin bounds the time from the end of the refusal to the pod's volumes being
// ready: a retry at most 2 s apart, the mount and the status patch, with much room for a
// loaded machine; half of what doubling would cost.
const recoveredWithin = 15 * time.Second

// The Node authorizer refuses a node a new pod's objects until its graph has the pod. The
// refusal is injected here, through the API proxy, on the pod's service account token (every
// pod's kube-api-access volume requests one): once it ends, the pod's volumes are ready
// within seconds. The real graph's lag is measured too, with a SubjectAccessReview as the
// node, and logged.
func TestRefusalCostsSeconds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{apiProxy: true})
	e.waitRegistered()

	measured, lag, ready := e.graphLag("measured")
	framework.Figure(t, "node graph: the token of a new pod allowed %s after its binding; volumes ready %s after it", lag, ready)
	e.deletePod(measured)

	var first time.Time
	e.api.Refuse(func(r *http.Request) bool {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/serviceaccounts/default/token") {
			return false
		}
		if first.IsZero() {
			first = time.Now()
		}
		return time.Since(first) < tokenRefusal
	})
	pod := e.pod("refused", corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	e.waitVolumesReady(pod)
	readyAt := time.Now()
	refused := e.api.Refused()
	if len(refused) < 2 {
		t.Fatalf("the token was refused %d times; the refusal was not injected", len(refused))
	}
	end := refused[0].Add(tokenRefusal)
	late := readyAt.Sub(end)
	framework.Figure(t, "token refused %d times over %s; volumes ready %s after the refusal ended", len(refused), tokenRefusal, late.Round(10*time.Millisecond))
	if late > recoveredWithin {
		t.Errorf("volumes ready %s after the refusal ended, want within %s: a refusal must not back the mount off for long", late, recoveredWithin)
	}
	e.deletePod(pod)
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// graphLag creates a pod and measures how long after the scheduler binds it the Node
// authorizer allows the node to request its service account token, and how long after that
// its volumes are ready.
func (e *env) graphLag(name string) (pod *corev1.Pod, allowed, ready time.Duration) {
	e.t.Helper()
	pod = e.pod(name, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	var bound time.Time
	if err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && p.Spec.NodeName != "" {
			bound = time.Now()
			return true, nil
		}
		return false, nil
	}); err != nil {
		e.t.Fatalf("pod %s not bound: %v", pod.Name, err)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:node:" + e.node, Groups: []string{"system:nodes", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token",
			Namespace: e.ns, Name: "default"}}}
	var allowedAt time.Time
	if err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := e.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err == nil && r.Status.Allowed {
			allowedAt = time.Now()
			return true, nil
		}
		return false, nil
	}); err != nil {
		e.t.Fatalf("the node is never allowed the token of pod %s: %v", pod.Name, err)
	}
	e.waitVolumesReady(pod)
	return pod, allowedAt.Sub(bound).Round(time.Millisecond), time.Since(allowedAt).Round(10 * time.Millisecond)
}
