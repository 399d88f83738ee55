package csrapprover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/nodeagent/nodecert"
	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// Config configures a Controller.
type Config struct {
	Client kubernetes.Interface
	Rules  Rules
	// Workers is the number of CSRs answered in parallel; default 2.
	Workers int
	// Resync re-reads every pending request (the informer's resync); default 10 min.
	Resync time.Duration
	// Registerer, if set, receives the queue's workqueue_* metrics.
	Registerer prometheus.Registerer
}

// Controller watches the CertificateSigningRequests of the kubelet client signer and
// answers those of node agents, in the shape of upstream's csrapproving controller.
type Controller struct {
	cfg      Config
	factory  informers.SharedInformerFactory
	lister   certlisters.CertificateSigningRequestLister
	queue    *controller.Queue[string]
	recorder record.EventRecorder
}

// New builds the controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("csrapprover: Config.Client is required")
	}
	if len(cfg.Rules.Requesters) == 0 {
		return nil, errors.New("csrapprover: at least one requester is required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Minute
	}
	// Only the kubelet client signer's requests are of interest.
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", nodecert.SignerName).String()
	}))
	inf := factory.Certificates().V1().CertificateSigningRequests()
	qc := controller.QueueConfig{RetryIntervalStart: 200 * time.Millisecond, RetryIntervalMax: time.Minute}
	if cfg.Registerer != nil {
		qc.Metrics = controller.NewQueueMetrics(cfg.Registerer)
	}
	c := &Controller{cfg: cfg, factory: factory, lister: inf.Lister(), queue: controller.NewQueue[string]("csrapprover", qc)}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run answers requests until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	recorder, stop := controller.NewEventRecorder(ctx, c.cfg.Client, "kubevol-csr-approver")
	defer stop()
	c.recorder = recorder
	klog.FromContext(ctx).Info("Answering node agents' certificate requests", "requesters", c.cfg.Rules.Requesters, "nodeSuffix", c.cfg.Rules.NodeSuffix)
	r := controller.NewRunner("csrapprover")
	r.AddSource(controller.Informers(c.factory))
	controller.Handle(r, c.queue, c.cfg.Workers, c.sync)
	return r.Run(ctx)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("csr", klog.KObj(csr), "requester", csr.Spec.Username)
	d := c.cfg.Rules.Decide(csr)
	switch d.Verdict {
	case Ignore:
		if d.Reason != "Answered" {
			logger.V(4).Info("Leaving the certificate signing request to other approvers", "reason", d.Reason, "detail", d.Message)
		}
		return nil
	case Approve:
		logger.Info("Approving a node agent's certificate", "reason", d.Reason, "detail", d.Message)
	case Deny:
		logger.Info("Denying a node agent's certificate request", "reason", d.Reason, "detail", d.Message)
	}
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: d.Reason, Message: d.Message, LastUpdateTime: metav1.Now(),
	}
	eventType, eventReason := corev1.EventTypeNormal, "CSRApproved"
	if d.Verdict == Deny {
		cond.Type = certificatesv1.CertificateDenied
		eventType, eventReason = corev1.EventTypeWarning, "CSRDenied"
	}
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	if _, err := c.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("update approval: %w", err)
	}
	c.recorder.Event(csr, eventType, eventReason, d.Message)
	return nil
}
