package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// TestRESTConfigContentTypes checks what the API server sees: the built-in clientset asks
// for protobuf first, and a dynamic client made from the same config (VolumeSnapshots) for
// JSON only, because custom resources have no protobuf form.
func TestRESTConfigContentTypes(t *testing.T) {
	var mu sync.Mutex
	accept := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accept[r.URL.Path] = r.Header.Get("Accept")
		mu.Unlock()
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", "")
	o := Options{Kubeconfig: kubeconfig, KubeAPIQPS: -1}
	cfg, err := o.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = cs.CoreV1().PersistentVolumes().Get(ctx, "pv", metav1.GetOptions{})
	_, _ = cs.StorageV1().VolumeAttachments().Get(ctx, "va", metav1.GetOptions{})
	snapshots := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	_, _ = dyn.Resource(snapshots).Namespace("ns").Get(ctx, "snap", metav1.GetOptions{})

	const protobufFirst = "application/vnd.kubernetes.protobuf,application/json"
	for path, want := range map[string]string{
		"/api/v1/persistentvolumes/pv":                                        protobufFirst,
		"/apis/storage.k8s.io/v1/volumeattachments/va":                        protobufFirst,
		"/apis/snapshot.storage.k8s.io/v1/namespaces/ns/volumesnapshots/snap": "application/json",
	} {
		if got := accept[path]; got != want {
			t.Errorf("GET %s: Accept %q, want %q", path, got, want)
		}
	}
	if cfg.ContentType != "application/vnd.kubernetes.protobuf" {
		t.Errorf("ContentType %q, want protobuf for request bodies", cfg.ContentType)
	}
}

// Out of a cluster, the journal's namespace is the ServiceAccount's of the kubeconfig, where
// its role grants leases; the flag and POD_NAMESPACE win over it, as for the Lease.
func TestHomeNamespace(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: storage}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", "")
	o := &Options{Kubeconfig: kc}
	if got := o.HomeNamespace(""); got != "storage" {
		t.Errorf("HomeNamespace = %q, want the kubeconfig context's storage", got)
	}
	if got := o.HomeNamespace("flag"); got != "flag" {
		t.Errorf("HomeNamespace(flag) = %q, want flag", got)
	}
	t.Setenv("POD_NAMESPACE", "pod")
	if got := o.HomeNamespace(""); got != "pod" {
		t.Errorf("HomeNamespace with POD_NAMESPACE = %q, want pod", got)
	}
	t.Setenv("POD_NAMESPACE", "")
	if got := (&Options{}).HomeNamespace(""); got != "default" {
		t.Errorf("HomeNamespace without a kubeconfig = %q, want default", got)
	}
}
