package driver

import (
	"context"
	"path"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/redact"
)

// Interfaces the CSI request messages share, to find what a call is about.
type (
	hasVolumeID       interface{ GetVolumeId() string }
	hasSourceVolumeID interface{ GetSourceVolumeId() string }
	hasSnapshotID     interface{ GetSnapshotId() string }
	hasGroupID        interface{ GetGroupSnapshotId() string }
	hasNodeID         interface{ GetNodeId() string }
	hasName           interface{ GetName() string }
	hasTargetPath     interface{ GetTargetPath() string }
	hasStagingPath    interface{ GetStagingTargetPath() string }
	hasCapability     interface{ GetVolumeCapability() *csi.VolumeCapability }
)

// describe extracts the subject of a request for logs and the call log.
func describe(method string, req any) CallRecord {
	r := CallRecord{Method: method}
	if v, ok := req.(hasVolumeID); ok {
		r.VolumeID = v.GetVolumeId()
	}
	if v, ok := req.(hasSourceVolumeID); ok && r.VolumeID == "" {
		r.VolumeID = v.GetSourceVolumeId()
	}
	if v, ok := req.(hasSnapshotID); ok {
		r.SnapshotID = v.GetSnapshotId()
	}
	if v, ok := req.(hasGroupID); ok {
		r.GroupSnapshotID = v.GetGroupSnapshotId()
	}
	if v, ok := req.(hasNodeID); ok {
		r.NodeID = v.GetNodeId()
	}
	if v, ok := req.(hasName); ok {
		r.Name = v.GetName()
	}
	if v, ok := req.(hasTargetPath); ok {
		r.Path = v.GetTargetPath()
	}
	if v, ok := req.(hasStagingPath); ok && r.Path == "" {
		r.Path = v.GetStagingTargetPath()
	}
	if v, ok := req.(hasCapability); ok && (method == "NodeStageVolume" || method == "NodePublishVolume") {
		for _, f := range v.GetVolumeCapability().GetMount().GetMountFlags() {
			if c, ok := strings.CutPrefix(f, "context="); ok {
				r.SELinuxContext = c
			}
		}
	}
	return r
}

// intercept wraps every RPC: a per-call logger with stable keys, the sanitized request at
// high verbosity (secrets are stripped as the kubernetes-csi sidecars do, and so are the
// service-account tokens a CO may put in volume_context: redact.CSI), fault injection,
// metrics and the call log (which records no request field that can hold a secret).
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	rec := describe(method, req)
	rec.Start = time.Now()
	if p, ok := peer.FromContext(ctx); ok && p.LocalAddr != nil {
		rec.Endpoint = p.LocalAddr.String()
	}
	logger := d.log.WithValues("method", method)
	if rec.VolumeID != "" {
		logger = logger.WithValues("volumeID", rec.VolumeID)
	}
	if rec.Name != "" {
		logger = logger.WithValues("name", rec.Name)
	}
	ctx = klog.NewContext(ctx, logger)
	logger.V(4).Info("Request", "request", redact.CSI(req))

	req = d.faults.clearFields(ctx, method, req)
	d.metrics.inflight.Inc()
	resp, err := d.faults.run(ctx, method, d.stopping, func() (any, error) {
		if err := d.cfg.off.unimplemented(method); err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		if err == nil {
			err = d.faults.shadow(ctx, method, req)
		}
		return resp, err
	})
	d.metrics.inflight.Dec()

	rec.End = time.Now()
	code := status.Code(err)
	rec.Code = code.String()
	d.metrics.observe(method, code, rec.End.Sub(rec.Start))
	d.calls.write(rec)
	switch code {
	case codes.OK:
		logger.V(3).Info("Call succeeded", "duration", rec.End.Sub(rec.Start))
		logger.V(5).Info("Response", "response", redact.CSI(resp))
	case codes.Internal, codes.Unknown, codes.DataLoss:
		logger.Error(err, "Call failed", "code", code)
	default:
		logger.V(2).Info("Call refused", "code", code, "err", status.Convert(err).Message())
	}
	return resp, err
}
