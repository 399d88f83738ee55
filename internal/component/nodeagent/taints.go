package nodeagent

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
)

// CompanionTaint keeps ordinary workloads off a companion Node, which runs no containers:
// a pod scheduled there would wait forever.
const CompanionTaint = "kubevol.io/companion=true:NoSchedule"

// ParseTaints reads the kubelet's --register-with-taints syntax: a comma-separated list of
// <key>=<value>:<effect> or <key>:<effect>.
func ParseTaints(s string) ([]v1.Taint, error) {
	var out []v1.Taint
	seen := map[string]bool{}
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return nil, fmt.Errorf("taint %q: want <key>=<value>:<effect>", spec)
		}
		key, value, _ := strings.Cut(kv, "=")
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, fmt.Errorf("taint %q: key: %s", spec, errs[0])
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return nil, fmt.Errorf("taint %q: value: %s", spec, errs[0])
		}
		switch e := v1.TaintEffect(effect); e {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("taint %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", spec)
		}
		if seen[key+":"+effect] {
			return nil, fmt.Errorf("taint %q: the key and effect are given twice", spec)
		}
		seen[key+":"+effect] = true
		out = append(out, v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)})
	}
	return out, nil
}

// warnMissingTaints reports the configured taints an adopted Node lacks. As the kubelet,
// the agent sets taints only when it creates its Node: NodeRestriction forbids a node to
// change its own taints afterwards, so an administrator must add them.
func (a *Agent) warnMissingTaints(ctx context.Context, node *v1.Node) {
	for _, want := range a.cfg.Taints {
		found := false
		for _, have := range node.Spec.Taints {
			if have.Key == want.Key && have.Effect == want.Effect && have.Value == want.Value {
				found = true
				break
			}
		}
		if found {
			continue
		}
		spec := want.Key
		if want.Value != "" {
			spec += "=" + want.Value
		}
		spec += ":" + string(want.Effect)
		cmd := fmt.Sprintf("kubectl taint nodes %s %s", node.Name, spec)
		klog.FromContext(ctx).Info("Warning: the Node existed without a taint of --register-with-taints, and a node may not add taints to its own Node; ordinary pods may be scheduled to it",
			"node", klog.KObj(node), "taint", spec, "fix", cmd)
		a.recorder.Eventf(nodeRef(node), v1.EventTypeWarning, "MissingTaint",
			"Node registered before without taint %s, which the agent cannot add; run: %s", spec, cmd)
	}
}

func nodeRef(n *v1.Node) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID}
}
