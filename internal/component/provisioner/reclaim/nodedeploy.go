package reclaim

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// accessibleFrom: the PV's required node affinity admits a node labelled with seg. With
// no segment or no affinity every PV is accessible, as upstream's node deployment decides.
func accessibleFrom(pv *corev1.PersistentVolume, seg map[string]string) bool {
	if seg == nil || pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return true
	}
	set := labels.Set(seg)
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		if termMatches(term, set) {
			return true
		}
	}
	return false
}

func termMatches(term corev1.NodeSelectorTerm, set labels.Set) bool {
	if len(term.MatchExpressions) == 0 {
		return false // an empty term selects no node
	}
	sel := labels.NewSelector()
	for _, e := range term.MatchExpressions {
		r, err := labels.NewRequirement(e.Key, selection.Operator(toSelectionOp(e.Operator)), e.Values)
		if err != nil {
			return false
		}
		sel = sel.Add(*r)
	}
	return sel.Matches(set)
}

func toSelectionOp(op corev1.NodeSelectorOperator) string {
	switch op {
	case corev1.NodeSelectorOpIn:
		return string(selection.In)
	case corev1.NodeSelectorOpNotIn:
		return string(selection.NotIn)
	case corev1.NodeSelectorOpExists:
		return string(selection.Exists)
	case corev1.NodeSelectorOpDoesNotExist:
		return string(selection.DoesNotExist)
	case corev1.NodeSelectorOpGt:
		return string(selection.GreaterThan)
	case corev1.NodeSelectorOpLt:
		return string(selection.LessThan)
	}
	return string(op)
}
