package node_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// The agent runs with its node's credential and no RBAC binding. It reads what its pods
// reference and nothing else: the credential itself is refused a Secret no pod of the node
// references and any list of Secrets, the agent holds one watch per referenced object
// (released when the last pod referencing it goes), a ConfigMap created after its pod is
// picked up, and a Secret deleted and created again under the same name reaches the files.
func TestNodeCredentialReadsOnlyReferencedObjects(t *testing.T) {
	t.Parallel()
	a := startAgent(t)
	ctx := a.ctx(3 * time.Minute)
	secrets := a.client.CoreV1().Secrets(a.ns)
	for name, value := range map[string]string{"used": "v1", "unrelated": "must-not-be-read"} {
		_, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"k": []byte(value)}}, metav1.CreateOptions{})
		mustf(t, err, "create secret %s", name)
	}
	secretVolume := func(name, secret string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
	}
	// "late" does not exist yet; two pods share "used".
	late := corev1.Volume{Name: "late", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "late"}}}}
	// No service-account token volume: its kube-root-ca.crt ConfigMap would be one more
	// referenced object (TestEveryPluginMountsUpdatesAndTearsDown covers tokens).
	noToken := func(p *corev1.Pod) *corev1.Pod { p.Spec.AutomountServiceAccountToken = ptr.To(false); return p }
	p1 := a.create(noToken(a.pod("p1", secretVolume("s", "used"), late)))
	p2 := a.create(noToken(a.pod("p2", secretVolume("s", "used"))))
	a.waitPod(p2.Name, time.Minute, "volumes ready", volumesReady)
	a.waitEvent(p1.Name, "FailedMount", `configmap "late" not found`, time.Minute)
	_, err := a.client.CoreV1().ConfigMaps(a.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Data: map[string]string{"k": "here"}}, metav1.CreateOptions{})
	mustf(t, err, "create configmap")
	p1 = a.waitPod(p1.Name, time.Minute, "volumes ready once the configMap exists", volumesReady)
	waitFile(t, filepath.Join(a.volumeDir(p1, "kubernetes.io~configmap", "late"), "k"), "here")

	// The agent's own credential: its pods' Secret yes, any other Secret or a list no.
	node := nodeClient(t, a.name)
	if _, err := node.CoreV1().Secrets(a.ns).Get(ctx, "used", metav1.GetOptions{}); err != nil {
		t.Errorf("node credential cannot GET the Secret its pod uses: %v", err)
	}
	if _, err := node.CoreV1().Secrets(a.ns).Get(ctx, "unrelated", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node credential GET of a Secret no pod of the node references: %v, want 403 Forbidden", err)
	}
	if _, err := node.CoreV1().Secrets(a.ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node credential list of Secrets: %v, want 403 Forbidden", err)
	}
	if _, err := node.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node credential list of PersistentVolumes: %v, want 403 Forbidden", err)
	}

	// One watch per distinct object referenced: Secret "used" (shared) and ConfigMap "late".
	a.waitWatches(t, map[string]int{"Secret": 1, "ConfigMap": 1})

	// Deleted and created again under the same name: the files follow.
	mustf(t, secrets.Delete(ctx, "used", metav1.DeleteOptions{}), "delete secret")
	_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "used"}, Data: map[string][]byte{"k": []byte("v2")}}, metav1.CreateOptions{})
	mustf(t, err, "re-create secret")
	for _, p := range []*corev1.Pod{p1, p2} {
		waitFile(t, filepath.Join(a.volumeDir(p, "kubernetes.io~secret", "s"), "k"), "v2")
	}

	// The watches go with the last pod that references their object.
	mustf(t, a.client.CoreV1().Pods(a.ns).Delete(ctx, p1.Name, metav1.DeleteOptions{}), "delete p1")
	a.waitGone(p1.Name, time.Minute)
	a.waitWatches(t, map[string]int{"Secret": 1, "ConfigMap": 0})
	mustf(t, a.client.CoreV1().Pods(a.ns).Delete(ctx, p2.Name, metav1.DeleteOptions{}), "delete p2")
	a.waitGone(p2.Name, time.Minute)
	a.waitWatches(t, map[string]int{"Secret": 0, "ConfigMap": 0})
}

// nodeClient is a client with the node's own credential.
func nodeClient(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", framework.NodeKubeconfig(t, name))
	mustf(t, err, "node kubeconfig")
	cs, err := kubernetes.NewForConfig(cfg)
	mustf(t, err, "node client")
	return cs
}

var watchesMetric = regexp.MustCompile(`(?m)^volume_manager_object_watches\{kind="(\w+)"\} (\d+)$`)

// waitWatches waits until the agent's volume_manager_object_watches are want.
func (a *agent) waitWatches(t *testing.T, want map[string]int) {
	t.Helper()
	var got map[string]int
	err := wait.PollUntilContextTimeout(a.ctx(time.Minute), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = map[string]int{}
		for _, m := range watchesMetric.FindAllStringSubmatch(scrape(t, a.metricsAddr, "/metrics"), -1) {
			got[m[1]], _ = strconv.Atoi(m[2])
		}
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Fatalf("volume_manager_object_watches = %v, want %v", got, want)
	}
}
