package secrets

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestRef(t *testing.T) {
	claim := Claim{PVName: "pvc-123", Name: "data", Namespace: "team-a", Annotations: map[string]string{"team/secret": "s3cret-name"}}
	for _, tc := range []struct {
		name    string
		kind    Kind
		params  map[string]string
		want    *corev1.SecretReference
		wantErr string
	}{
		{name: "none", kind: Provisioner, params: map[string]string{"type": "x"}},
		{name: "plain", kind: NodeStage, params: map[string]string{NodeStage.NameKey: "n", NodeStage.NamespaceKey: "ns"},
			want: &corev1.SecretReference{Name: "n", Namespace: "ns"}},
		{name: "templates", kind: Provisioner, params: map[string]string{
			Provisioner.NameKey: "${pvc.name}-${pv.name}", Provisioner.NamespaceKey: "${pvc.namespace}"},
			want: &corev1.SecretReference{Name: "data-pvc-123", Namespace: "team-a"}},
		{name: "annotation", kind: NodePublish, params: map[string]string{
			NodePublish.NameKey: "${pvc.annotations['team/secret']}", NodePublish.NamespaceKey: "${pvc.namespace}"},
			want: &corev1.SecretReference{Name: "s3cret-name", Namespace: "team-a"}},
		{name: "default fills in", kind: ControllerExpand, params: map[string]string{Default.NameKey: "d", Default.NamespaceKey: "dns"},
			want: &corev1.SecretReference{Name: "d", Namespace: "dns"}},
		{name: "deprecated", kind: ControllerPublish, params: map[string]string{"csiControllerPublishSecretName": "o", "csiControllerPublishSecretNamespace": "ons"},
			want: &corev1.SecretReference{Name: "o", Namespace: "ons"}},
		{name: "deprecated and new", kind: ControllerPublish, params: map[string]string{"csiControllerPublishSecretName": "o", ControllerPublish.NameKey: "n", ControllerPublish.NamespaceKey: "x"},
			wantErr: "twice"},
		{name: "half", kind: Provisioner, params: map[string]string{Provisioner.NameKey: "n"}, wantErr: "needs both"},
		{name: "empty", kind: Provisioner, params: map[string]string{Provisioner.NameKey: "", Provisioner.NamespaceKey: "x"}, wantErr: "empty"},
		{name: "namespace from pvc name is refused", kind: Provisioner, params: map[string]string{Provisioner.NameKey: "n", Provisioner.NamespaceKey: "${pvc.name}"},
			wantErr: "invalid tokens [${pvc.name}]"},
		{name: "unknown token", kind: Provisioner, params: map[string]string{Provisioner.NameKey: "${pvc.label}", Provisioner.NamespaceKey: "x"},
			wantErr: "invalid tokens [${pvc.label}]"},
		{name: "missing annotation", kind: Provisioner, params: map[string]string{Provisioner.NameKey: "${pvc.annotations['nope']}", Provisioner.NamespaceKey: "x"},
			wantErr: "invalid tokens"},
		{name: "bad name", kind: Provisioner, params: map[string]string{Provisioner.NameKey: "Not_Valid", Provisioner.NamespaceKey: "x"},
			wantErr: "not a valid secret name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Ref(tc.kind, tc.params, claim)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
