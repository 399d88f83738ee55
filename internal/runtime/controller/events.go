package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// NewEventRecorder starts an event broadcaster that writes events through client and logs
// them at level 3, and returns a recorder whose events name component as their source,
// with the function that stops the broadcaster (after the last event, so after Run).
func NewEventRecorder(ctx context.Context, client kubernetes.Interface, component string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}), startRecording(b, client)
}

// NewDeferredEventRecorder is NewEventRecorder for a component that hands its recorder out
// before it runs (a node agent, whose events also name their host): the broadcaster starts
// only when start is called, and start returns the function that stops it. Events recorded
// before start are dropped, as a broadcaster with no sink drops them.
func NewDeferredEventRecorder(source corev1.EventSource) (rec record.EventRecorder, start func(client kubernetes.Interface) (stop func())) {
	b := record.NewBroadcaster()
	return b.NewRecorder(scheme.Scheme, source), func(client kubernetes.Interface) func() { return startRecording(b, client) }
}

// startRecording logs b's events at level 3, as the kubelet and the sidecars do, and writes
// them through client.
func startRecording(b record.EventBroadcaster, client kubernetes.Interface) func() {
	b.StartStructuredLogging(3)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.Shutdown
}
