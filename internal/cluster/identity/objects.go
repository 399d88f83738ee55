package identity

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Account is a ServiceAccount and the RBAC bound to it.
type Account struct {
	// Namespace and Name of the ServiceAccount; the Role and RoleBinding share them.
	Namespace, Name string
	// ClusterName names the ClusterRole and ClusterRoleBinding: cluster-scoped, so it
	// must be unique across namespaces (the namespace in it, for instance).
	ClusterName string
	// Labels go on every object.
	Labels map[string]string
	Rules  Rules
}

// Objects are the objects of an Account; nil where it has no rules of that scope.
type Objects struct {
	ServiceAccount     *corev1.ServiceAccount
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	Role               *rbacv1.Role
	RoleBinding        *rbacv1.RoleBinding
}

// Render renders a's objects: its rules in a ClusterRole and a Role of its namespace,
// each bound to its ServiceAccount alone.
func (a Account) Render() Objects {
	meta := func(ns, name string) metav1.ObjectMeta {
		labels := make(map[string]string, len(a.Labels))
		for k, v := range a.Labels {
			labels[k] = v
		}
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: a.Name, Namespace: a.Namespace}}
	o := Objects{ServiceAccount: &corev1.ServiceAccount{ObjectMeta: meta(a.Namespace, a.Name)}}
	if len(a.Rules.Cluster) > 0 {
		o.ClusterRole = &rbacv1.ClusterRole{ObjectMeta: meta("", a.ClusterName), Rules: a.Rules.Cluster}
		o.ClusterRoleBinding = &rbacv1.ClusterRoleBinding{ObjectMeta: meta("", a.ClusterName), Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: a.ClusterName}}
	}
	if len(a.Rules.Namespaced) > 0 {
		o.Role = &rbacv1.Role{ObjectMeta: meta(a.Namespace, a.Name), Rules: a.Rules.Namespaced}
		o.RoleBinding = &rbacv1.RoleBinding{ObjectMeta: meta(a.Namespace, a.Name), Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: a.Name}}
	}
	return o
}

// Ensure creates a's objects, or updates those that exist (a restart of `kubevol up`
// finds its own), then waits until the authorizer grants the ServiceAccount its rules.
func Ensure(ctx context.Context, cs kubernetes.Interface, a Account) error {
	o := a.Render()
	sas := cs.CoreV1().ServiceAccounts(a.Namespace)
	if _, err := sas.Create(ctx, o.ServiceAccount, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s: %w", a.Namespace, a.Name, err)
	}
	if o.ClusterRole != nil {
		c := cs.RbacV1().ClusterRoles()
		if err := upsert(ctx, "ClusterRole", a.ClusterName, o.ClusterRole, c.Create, c.Get, c.Update, func(have, want *rbacv1.ClusterRole) {
			have.Labels, have.Rules, have.AggregationRule = want.Labels, want.Rules, nil
		}); err != nil {
			return err
		}
		b := cs.RbacV1().ClusterRoleBindings()
		if err := upsert(ctx, "ClusterRoleBinding", a.ClusterName, o.ClusterRoleBinding, b.Create, b.Get, b.Update, func(have, want *rbacv1.ClusterRoleBinding) {
			have.Labels, have.Subjects, have.RoleRef = want.Labels, want.Subjects, want.RoleRef
		}); err != nil {
			return err
		}
	}
	if o.Role != nil {
		r := cs.RbacV1().Roles(a.Namespace)
		if err := upsert(ctx, "Role", a.Name, o.Role, r.Create, r.Get, r.Update, func(have, want *rbacv1.Role) {
			have.Labels, have.Rules = want.Labels, want.Rules
		}); err != nil {
			return err
		}
		b := cs.RbacV1().RoleBindings(a.Namespace)
		if err := upsert(ctx, "RoleBinding", a.Name, o.RoleBinding, b.Create, b.Get, b.Update, func(have, want *rbacv1.RoleBinding) {
			have.Labels, have.Subjects, have.RoleRef = want.Labels, want.Subjects, want.RoleRef
		}); err != nil {
			return err
		}
	}
	return WaitAuthorized(ctx, cs, a.Namespace, a.Name, a.Rules)
}

type (
	createFn[T any] func(context.Context, T, metav1.CreateOptions) (T, error)
	getFn[T any]    func(context.Context, string, metav1.GetOptions) (T, error)
	updateFn[T any] func(context.Context, T, metav1.UpdateOptions) (T, error)
)

// upsert creates want, or makes the existing object say what want says (merge). A binding's
// roleRef is immutable: the update of a binding of that name to another role is refused,
// and Ensure returns that error.
func upsert[T any](ctx context.Context, kind, name string, want T, create createFn[T], get getFn[T], update updateFn[T], merge func(have, want T)) error {
	_, err := create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var have T
		if have, err = get(ctx, name, metav1.GetOptions{}); err == nil {
			merge(have, want)
			_, err = update(ctx, have, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return nil
}

// WaitAuthorized waits until the authorizer grants ServiceAccount ns/sa the first rule of
// each role: RBAC reaches the authorizer through an informer, a moment after the write.
func WaitAuthorized(ctx context.Context, cs kubernetes.Interface, ns, sa string, rules Rules) error {
	user := User(ns, sa)
	for _, p := range probes(ns, rules) {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}, ResourceAttributes: &p}}, metav1.CreateOptions{})
			return err == nil && sar.Status.Allowed, nil
		})
		if err != nil {
			return fmt.Errorf("%s is not granted %s %s/%s after binding its RBAC: %w", user, p.Verb, p.Resource, p.Subresource, err)
		}
	}
	return nil
}

// probes are one request per scope that the rules grant (the first rule without
// resourceNames).
func probes(ns string, rules Rules) []authorizationv1.ResourceAttributes {
	var out []authorizationv1.ResourceAttributes
	for _, set := range []struct {
		rules []rbacv1.PolicyRule
		ns    string
	}{{rules.Cluster, ""}, {rules.Namespaced, ns}} {
		for _, r := range set.rules {
			if len(r.APIGroups) > 0 && len(r.Resources) > 0 && len(r.Verbs) > 0 && len(r.ResourceNames) == 0 {
				res, sub, _ := strings.Cut(r.Resources[0], "/")
				out = append(out, authorizationv1.ResourceAttributes{Namespace: set.ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: res, Subresource: sub})
				break
			}
		}
	}
	return out
}

// Delete deletes a's objects, ignoring those that are gone.
func Delete(ctx context.Context, cs kubernetes.Interface, a Account) {
	opts := metav1.DeleteOptions{}
	_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, a.ClusterName, opts)
	_ = cs.RbacV1().ClusterRoles().Delete(ctx, a.ClusterName, opts)
	_ = cs.RbacV1().RoleBindings(a.Namespace).Delete(ctx, a.Name, opts)
	_ = cs.RbacV1().Roles(a.Namespace).Delete(ctx, a.Name, opts)
	_ = cs.CoreV1().ServiceAccounts(a.Namespace).Delete(ctx, a.Name, opts)
}
