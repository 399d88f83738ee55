package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// seLinuxPod is a pod of the env whose containers run at the SELinux level, with the pod's
// seLinuxChangePolicy (nil: MountOption, the default).
func (e *env) seLinuxPod(name, claim, level string, policy *corev1.PodSELinuxChangePolicy) *corev1.Pod {
	e.t.Helper()
	pod := e.podObject(name, []corev1.Volume{kubecheck.ClaimVolume("data", claim)}, nil)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Level: level}, SELinuxChangePolicy: policy}
	return e.create(pod)
}

// contexts are the context= mount flags of the driver's successful NodeStageVolume and
// NodePublishVolume calls on volumeID, in call-log order.
func (e *env) contexts(volumeID string) (stage, publish []string) {
	for _, c := range e.calls() {
		if c.VolumeID != volumeID || c.Code != "OK" {
			continue
		}
		switch c.Method {
		case "NodeStageVolume":
			stage = append(stage, c.SELinuxContext)
		case "NodePublishVolume":
			publish = append(publish, c.SELinuxContext)
		}
	}
	return stage, publish
}

// SELinux context mounts through the whole node (KEP-1710, SELinuxMount GA in 1.37): with
// the agent told that the host runs SELinux and a CSIDriver with seLinuxMount: true, the
// agent stages and publishes a pod's claim with the mount flag context="<label>" built
// from the pod's level, as the kubelet; a pod asking for seLinuxChangePolicy Recursive gets
// no context (the runtime relabels); a second pod with another level on the mounted claim
// is refused with the kubelet's "conflicting SELinux labels"; once the first pod is gone,
// a pod with another level has the volume unstaged and staged again with its context,
// not the device staged with the old one. This kernel has no SELinux,
// so the driver's call log, not the mount table, shows what the agent chose.
func TestSELinuxContextMount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agentArgs: []string{"--selinux-enabled=true"},
		csiDriver: func(s *storagev1.CSIDriverSpec) { s.SELinuxMount = ptr.To(true) }})
	e.pvc("labelled")
	e.pvc("recursive")
	a := e.waitVolumesReady(e.seLinuxPod("a", "labelled", "s0:c1,c2", nil))
	b := e.waitVolumesReady(e.seLinuxPod("b", "recursive", "s0:c3,c4", ptr.To(corev1.SELinuxChangePolicyRecursive)))

	want := `"system_u:object_r:container_file_t:s0:c1,c2"`
	stage, publish := e.contexts(e.boundPV("labelled").Spec.CSI.VolumeHandle)
	if len(stage) != 1 || stage[0] != want || len(publish) != 1 || publish[0] != want {
		t.Errorf("claim of pod a (level s0:c1,c2): NodeStageVolume contexts %q, NodePublishVolume contexts %q, want one each of %s", stage, publish, want)
	}
	stage, publish = e.contexts(e.boundPV("recursive").Spec.CSI.VolumeHandle)
	if len(stage) != 1 || stage[0] != "" || len(publish) != 1 || publish[0] != "" {
		t.Errorf("claim of pod b (seLinuxChangePolicy Recursive): NodeStageVolume contexts %q, NodePublishVolume contexts %q, want one each without a context", stage, publish)
	}

	c := e.seLinuxPod("c", "labelled", "s0:c7,c8", nil)
	_, err := kubecheck.WaitForEvent(e.ctx, e.cs, e.ns, c.Name, time.Minute, func(ev corev1.Event) bool {
		return ev.Reason == "FailedMount" && strings.Contains(ev.Message, "conflicting SELinux labels of volume")
	})
	if err != nil {
		t.Errorf("pod c (level s0:c7,c8) on the claim pod a mounted with s0:c1,c2: no FailedMount event for conflicting SELinux labels: %v", err)
	}
	e.deletePod(c)
	e.deletePod(a)

	// Once pod a is gone, a pod with another level gets the claim staged again with its
	// own context: the device staged with s0:c1,c2 is unstaged first, as the kubelet does.
	d := e.waitVolumesReady(e.seLinuxPod("d", "labelled", "s0:c5,c6", nil))
	handle := e.boundPV("labelled").Spec.CSI.VolumeHandle
	stage, publish = e.contexts(handle)
	again := `"system_u:object_r:container_file_t:s0:c5,c6"`
	if len(stage) != 2 || stage[1] != again || len(publish) != 2 || publish[1] != again {
		t.Errorf("claim of pod d (level s0:c5,c6) after pod a: NodeStageVolume contexts %q, NodePublishVolume contexts %q, want a second of each with %s", stage, publish, again)
	}
	calls := e.succeeded(handle)
	var stages []int
	unstage := -1
	for i, m := range calls {
		switch {
		case m == "NodeStageVolume":
			stages = append(stages, i)
		case m == "NodeUnstageVolume" && unstage < 0:
			unstage = i
		}
	}
	if len(stages) != 2 || unstage < stages[0] || unstage > stages[1] {
		t.Errorf("calls on the claim's volume %v: want a NodeUnstageVolume between the two NodeStageVolume", calls)
	}
	e.deletePod(d)
	e.deletePod(b)
}
