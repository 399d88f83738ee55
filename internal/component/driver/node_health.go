package driver

import (
	"context"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// NodeGetVolumeHealth reports what the node sees wrong with a volume: missing bytes, a lost
// loop device or mount, a filesystem the kernel turned read-only.
func (n *node) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := required("volume_id", id); err != nil {
		return nil, err
	}
	ref, err := n.resolve(id)
	if err != nil {
		return nil, err
	}
	h := &csi.VolumeHealth{VolumeId: id}
	add := func(t csi.VolumeHealthErrorType, reason, format string, args ...any) {
		h.HealthStatuses = append(h.HealthStatuses, healthEntry(t, reason, format, args...))
	}
	if _, err := os.Stat(ref.path); err != nil {
		add(csi.VolumeHealthErrorType_DATA_LOSS, "DataMissing", "volume data %s: %v", ref.path, err)
	}
	mt, err := readMountTable()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read mounts: %v", err)
	}
	if s := n.stage(id); s != nil && s.Phase == state.PhaseDone {
		if ref.typ == state.TypeBlock {
			if dev, err := n.loops.Find(ctx, ref.path); err == nil && dev == "" {
				add(csi.VolumeHealthErrorType_INACCESSIBLE, "DeviceDetached", "no loop device is attached to %s", ref.path)
			}
		}
		if !s.Block && mt.at(s.StagingPath) == nil {
			add(csi.VolumeHealthErrorType_INACCESSIBLE, "StagingMountMissing", "nothing is mounted at staging path %s", s.StagingPath)
		}
	}
	for _, p := range n.publishesOf(id) {
		if p.Phase != state.PhaseDone {
			continue
		}
		m := mt.at(p.TargetPath)
		switch {
		case m == nil:
			add(csi.VolumeHealthErrorType_INACCESSIBLE, "TargetMountMissing", "nothing is mounted at target %s", p.TargetPath)
		case !p.ReadOnly && slices.Contains(m.MountOptions, "ro"):
			add(csi.VolumeHealthErrorType_DEGRADED, "ReadOnlyFilesystem", "target %s is mounted read-only", p.TargetPath)
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: h}, nil
}

// NodeGetStorageHealth checks the filesystem under the state directory: reachable, writable,
// not full.
func (n *node) NodeGetStorageHealth(context.Context, *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	resp := &csi.NodeGetStorageHealthResponse{}
	add := func(t csi.StorageHealthErrorType, reason, msg string) {
		resp.BackendHealth = append(resp.BackendHealth, &csi.NodeGetStorageHealthResponse_StorageBackendHealth{Status: t, Reason: reason, Message: msg})
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(n.cfg.StateDir, &fs); err != nil {
		add(csi.StorageHealthErrorType_STORAGE_UNREACHABLE, "StatfsFailed", err.Error())
		return resp, nil
	}
	if f, err := os.CreateTemp(n.cfg.StateDir, ".health-*"); err != nil {
		add(csi.StorageHealthErrorType_STORAGE_UNREACHABLE, "NotWritable", err.Error())
	} else {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	if fs.Blocks > 0 && fs.Bavail*100 < fs.Blocks {
		add(csi.StorageHealthErrorType_STORAGE_DEGRADED, "AlmostFull", "less than 1% of "+filepath.Clean(n.cfg.StateDir)+" is free")
	}
	return resp, nil
}
