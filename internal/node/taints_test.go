package node

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
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
