package kubecheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Events lists the events of the object named name in ns.
func Events(ctx context.Context, cs kubernetes.Interface, ns, name string) ([]corev1.Event, error) {
	list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// EventLines returns the events of the object named name in ns, each formatted by line.
// A failed list comes back as its only line: callers print or search the lines, and a
// failure message should say why there are none. It lists with its own context so that it
// still works for the failure message of a check whose context has ended.
func EventLines(cs kubernetes.Interface, ns, name string, line func(corev1.Event) string) []string {
	evs, err := Events(context.Background(), cs, ns, name)
	if err != nil {
		return []string{err.Error()}
	}
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, line(ev))
	}
	return out
}

// ReasonMessage is an event as "Reason: message".
func ReasonMessage(ev corev1.Event) string { return ev.Reason + ": " + ev.Message }

// EventWith matches an event of reason whose message contains text.
func EventWith(reason, text string) func(corev1.Event) bool {
	return func(ev corev1.Event) bool { return ev.Reason == reason && strings.Contains(ev.Message, text) }
}

// WaitForEvent waits up to timeout for an event of the object named name in ns that match
// accepts, and returns it. The error lists the events seen.
func WaitForEvent(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration, match func(corev1.Event) bool) (corev1.Event, error) {
	var found corev1.Event
	var seen []string
	err := Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		evs, err := Events(ctx, cs, ns, name)
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range evs {
			seen = append(seen, ReasonMessage(ev))
			if match(ev) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return found, fmt.Errorf("no such event on %s/%s: %w; events: %q", ns, name, err, seen)
	}
	return found, nil
}

// NamespaceEvents is every event of ns, one a line, for a failure message.
func NamespaceEvents(ctx context.Context, cs kubernetes.Interface, ns string) string {
	list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "\n  %s %s/%s %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}
