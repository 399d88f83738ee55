package lifecycle

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/internal/runtime/redact"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// maxVerbosity is klog's largest -v (its Level is an int32): every V() is on, client-go's
// whole request and response bodies (V(8) to V(10)) included.
const maxVerbosity = "2147483647"

// No service-account token and no secret reaches a log, at the highest verbosity of every
// process: a driver whose CSIDriver asks for tokens in secrets (serviceAccountTokenInSecrets)
// and one that leaves it unset (tokens in volume_context) publish inline volumes with tokens
// and a node-publish secret; a raw block claim whose StorageClass names a secret for every
// call that takes one (provisioner, controller-publish, node-stage, node-publish,
// controller-expand, node-expand) is provisioned, attached, staged, published, expanded and
// deleted. Then every log and call log is searched for each token and secret value, raw,
// in hex and in base64, whole or in part.
func TestNoSecretsInLogs(t *testing.T) {
	t.Parallel()
	creds := map[string]string{"password": rand.String(40), "key": rand.String(40)}
	params := map[string]string{"type": "block"}
	for _, call := range []string{"provisioner", "controller-publish", "node-stage", "node-publish", "controller-expand", "node-expand"} {
		params["csi.storage.k8s.io/"+call+"-secret-name"] = "creds"
		params["csi.storage.k8s.io/"+call+"-secret-namespace"] = "${pvc.namespace}"
	}
	withTokens := func(s *storagev1.CSIDriverSpec) {
		// Two audiences: a named one and the API server's (empty).
		s.TokenRequests = []storagev1.TokenRequest{{Audience: "vault"}, {Audience: ""}}
	}
	e := newEnv(t, envOptions{attachRequired: true, resizer: true, readSecrets: true, verbosity: maxVerbosity, nodeProxy: true, scParams: params,
		// The agent reports a volume no longer in use only with its next status update,
		// and the attach/detach controller detaches only then.
		agentArgs: []string{"--node-status-interval", "1s"},
		csiDriver: func(s *storagev1.CSIDriverSpec) {
			withTokens(s)
			s.ServiceAccountTokenInSecrets = ptr.To(true)
		}})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: e.ns}, StringData: creds}
	if _, err := e.cs.CoreV1().Secrets(e.ns).Create(e.ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRegistered() // before the second driver: it checks that the Node names this one only
	other := e.startDriver(withTokens, maxVerbosity)
	other.waitRegistered(e)

	// (a) Inline volumes of both drivers, with tokens and the node-publish secret.
	inline := func(driver string) corev1.Volume {
		return corev1.Volume{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: driver, VolumeAttributes: map[string]string{"type": "dir", "size": "8Mi"},
			NodePublishSecretRef: &corev1.LocalObjectReference{Name: "creds"},
		}}}
	}
	inSecrets := e.waitVolumesReady(e.pod("in-secrets", inline(e.name)))
	inContext := e.waitVolumesReady(e.pod("in-context", inline(other.name)))

	// (b) A claim that takes a secret at every call.
	pvc := e.pvcOf("data", "16Mi", corev1.PersistentVolumeBlock)
	claimPod := e.waitVolumesReady(e.podWith("claim", nil, []corev1.Volume{kubecheck.ClaimVolume("data", pvc.Name)}))
	e.expandClaim(pvc.Name, "32Mi")
	pv := e.boundPV(pvc.Name)
	e.checkExpansionCalls(pv.Spec.CSI.VolumeHandle)

	values := map[string]string{}
	for k, v := range creds {
		values["secret key "+k] = v
	}
	target := func(pod *corev1.Pod) string {
		return filepath.Join(e.root, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", "inline", "mount")
	}
	// The tokens go where each CSIDriver asks, and nowhere else; the node-publish secret
	// travels beside them.
	for _, c := range []struct {
		pod       *corev1.Pod
		proxy     *nodeProxy
		inSecrets bool
	}{{inSecrets, e.proxy, true}, {inContext, other.proxy, false}} {
		reqs := c.proxy.publishedTo(target(c.pod))
		if len(reqs) == 0 {
			t.Fatalf("pod %s: no NodePublishVolume seen", c.pod.Name)
		}
		for _, r := range reqs {
			where, other := r.GetVolumeContext(), r.GetSecrets()
			if c.inSecrets {
				where, other = other, where
			}
			if _, ok := other[redact.TokensKey]; ok {
				t.Errorf("pod %s (serviceAccountTokenInSecrets=%v): tokens in the wrong field", c.pod.Name, c.inSecrets)
			}
			if _, ok := where[redact.TokensKey]; !ok {
				t.Errorf("pod %s (serviceAccountTokenInSecrets=%v): no tokens where the CSIDriver asks", c.pod.Name, c.inSecrets)
				where = other // to search the logs for them all the same
			}
			if r.GetSecrets()["password"] != creds["password"] {
				t.Errorf("pod %s: the node-publish secret is not in the secrets", c.pod.Name)
			}
			var tokens map[string]struct{ Token string }
			if err := json.Unmarshal([]byte(where[redact.TokensKey]), &tokens); err != nil || len(tokens) != 2 {
				t.Fatalf("pod %s: want tokens for 2 audiences, got %d (%v)", c.pod.Name, len(tokens), err)
			}
			for aud, tok := range tokens {
				// Searched for: the signature, the part that makes the token a credential.
				// Its header and claims are base64 of public facts (issuer, pod and node
				// names) that other base64 text in the logs shares.
				parts := strings.Split(tok.Token, ".")
				if len(parts) != 3 || len(parts[2]) < 32 {
					t.Fatalf("pod %s: the token for audience %q is no signed JWT", c.pod.Name, aud)
				}
				values["signature of the token of pod "+c.pod.Name+" for audience "+aud] = parts[2]
			}
		}
	}

	e.deletePod(inSecrets)
	e.deletePod(inContext)
	e.deletePod(claimPod)
	e.deleteClaim(pvc.Name, pv.Name)
	// Stopped, so that the logs are whole, shutdown included.
	files := []string{e.callLog, other.callLog}
	for _, p := range e.procs {
		p.Stop()
		files = append(files, p.LogPath)
	}
	// The verbosity took effect: requests were logged (sanitized) on both sides of the CSI
	// socket, and client-go logged bodies.
	for _, want := range []struct {
		proc string
		line []string
	}{
		{"driver", []string{`"Request"`, `method="NodePublishVolume"`, redact.Stripped}},
		{"node", []string{`"GRPC call"`, `method="NodePublishVolume"`, redact.Stripped}},
		{"node", []string{`"Response Body"`}},
		{"provisioner", []string{`"GRPC call"`, `method="CreateVolume"`, redact.Stripped}},
		{"provisioner", []string{`"Response Body"`}},
		{"attacher", []string{`"GRPC call"`, `method="ControllerPublishVolume"`, redact.Stripped}},
		{"resizer", []string{`"GRPC call"`, `method="ControllerExpandVolume"`, redact.Stripped}},
	} {
		if !logHas(t, e.procs, want.proc, want.line) {
			t.Errorf("the %s log has no line with %q: the test checks nothing there", want.proc, want.line)
		}
	}
	leaks, err := framework.FindLeaks(files, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leaks {
		t.Errorf("leaked: %s", l)
	}
}

// logHas reports whether the log of a process started as `kubevol <name>` has a line with
// every part.
func logHas(t *testing.T, procs []*framework.Process, name string, parts []string) bool {
	t.Helper()
	for _, p := range procs {
		if filepath.Base(p.LogPath) != name+".log" {
			continue
		}
		data, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return true
			}
		}
	}
	return false
}

// extraDriver is a second driver on the test's node, registered with the same agent.
type extraDriver struct {
	name    string
	callLog string
	proxy   *nodeProxy
}

// startDriver starts a second `kubevol driver`, its CSIDriver adjusted by spec, registered
// through a nodeProxy.
func (e *env) startDriver(spec func(*storagev1.CSIDriverSpec), verbosity string) *extraDriver {
	e.t.Helper()
	dir := filepath.Join(e.dir, "d2")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		e.t.Fatal(err)
	}
	d := &extraDriver{name: "e2e-" + rand.String(6) + ".kubevol.io", callLog: filepath.Join(dir, "calls.jsonl")}
	s := storagev1.CSIDriverSpec{
		AttachRequired:       ptr.To(false),
		PodInfoOnMount:       ptr.To(true),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral},
	}
	spec(&s)
	e.apply(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.name}, Spec: s})
	sock, proxySock := "unix://"+filepath.Join(dir, "csi.sock"), filepath.Join(dir, "proxy.sock")
	d.proxy = startNodeProxy(e.t, proxySock, sock)
	e.procs = append(e.procs, framework.StartKubevol(e.t, "driver", "--endpoint", sock, "--node-id", e.node,
		"--state-dir", filepath.Join(dir, "state"), "--drivername", d.name, "--call-log", d.callLog,
		"--plugin-registration-dir", filepath.Join(e.root, "plugins_registry"), "--kubelet-registration-path", proxySock,
		"-v", verbosity))
	return d
}

// waitRegistered waits for the agent to publish the driver in the CSINode.
func (d *extraDriver) waitRegistered(e *env) {
	e.t.Helper()
	e.poll("driver "+d.name+" in CSINode "+e.node, func(ctx context.Context) (bool, error) {
		cn, err := e.cs.StorageV1().CSINodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, drv := range cn.Spec.Drivers {
			if drv.Name == d.name {
				return true, nil
			}
		}
		return false, nil
	})
}
