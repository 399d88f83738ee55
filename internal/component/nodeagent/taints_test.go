package nodeagent

import (
	"context"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

func TestParseTaints(t *testing.T) {
	got, err := ParseTaints("a=b:NoSchedule, example.com/k:NoExecute,,c=:PreferNoSchedule")
	if err != nil {
		t.Fatal(err)
	}
	want := []v1.Taint{
		{Key: "a", Value: "b", Effect: v1.TaintEffectNoSchedule},
		{Key: "example.com/k", Effect: v1.TaintEffectNoExecute},
		{Key: "c", Effect: v1.TaintEffectPreferNoSchedule},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v", got)
	}
	if got, err := ParseTaints(""); err != nil || got != nil {
		t.Errorf("empty: %v %v", got, err)
	}
	if got, err := ParseTaints(CompanionTaint); err != nil || len(got) != 1 || got[0].Effect != v1.TaintEffectNoSchedule {
		t.Errorf("default: %v %v", got, err)
	}
	for _, bad := range []string{"a=b", "a=b:", "=b:NoSchedule", "a b=c:NoSchedule", "a=b c:NoSchedule", "a=b:NoSchedule,a=c:NoSchedule", "a:noschedule"} {
		if _, err := ParseTaints(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNewNodeCarriesTaintsAndWarnsWhenAdoptedWithout(t *testing.T) {
	taints, _ := ParseTaints(CompanionTaint)
	rec := record.NewFakeRecorder(10)
	a := &Agent{cfg: Config{NodeName: "n1-kubevol", Taints: taints}, recorder: rec}
	if n := a.newNode(); !reflect.DeepEqual(n.Spec.Taints, taints) {
		t.Errorf("created Node taints %+v", n.Spec.Taints)
	}
	// Registered before the taint existed: a warning naming the command, once per taint.
	a.warnMissingTaints(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1-kubevol"}})
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "Warning MissingTaint") || !strings.Contains(e, "kubectl taint nodes n1-kubevol kubevol.io/companion=true:NoSchedule") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no event for a Node without its taint")
	}
	a.warnMissingTaints(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1-kubevol"}, Spec: v1.NodeSpec{Taints: taints}})
	if len(rec.Events) != 0 {
		t.Errorf("event for a Node that has its taint: %q", <-rec.Events)
	}
}
