package csiclient

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestFetchSecrets(t *testing.T) {
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "n"}, Data: map[string][]byte{"k": []byte("v")}})
	got, err := FetchSecrets(context.Background(), cs, &corev1.SecretReference{Name: "s", Namespace: "n"})
	if err != nil || got["k"] != "v" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := FetchSecrets(context.Background(), cs, &corev1.SecretReference{Name: "missing", Namespace: "n"}); err == nil {
		t.Fatal("missing secret must fail")
	}
	if got, err := FetchSecrets(context.Background(), cs, nil); got != nil || err != nil {
		t.Fatalf("nil ref = %v, %v; want no secrets and no error", got, err)
	}
}
