package driver

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
	"github.com/kubevol/kubevol/internal/runtime/sizes"
)

// publishEphemeral serves a CSI inline ephemeral volume (Kubernetes "CSI ephemeral
// volumes"): NodePublishVolume with csi.storage.k8s.io/ephemeral=true creates the volume,
// from the volume attributes type, size and fsType, and NodeUnpublishVolume deletes it.
// There is no stage: the volume is mounted straight at the target.
func (n *node) publishEphemeral(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if !backend.ValidID(id) {
		return nil, status.Errorf(codes.InvalidArgument, "volume_id %q cannot name an ephemeral volume", id)
	}
	attrs := req.GetVolumeContext()
	params, err := parseParams(attrs)
	if err != nil {
		return nil, err
	}
	vc := req.GetVolumeCapability()
	if vc.GetBlock() != nil {
		return nil, status.Error(codes.FailedPrecondition, "ephemeral volumes are filesystem volumes only")
	}
	if r := n.cfg.off.unsupported(params.typ, false, vc); r != "" {
		return nil, status.Error(codes.FailedPrecondition, r)
	}
	size, err := ephemeralSize(attrs, params)
	if err != nil {
		return nil, err
	}
	release, err := n.locks.acquire(volumeKey(id))
	if err != nil {
		return nil, err
	}
	defer release()

	b, err := backend.New(params.typ, n.ephLayout)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	v := &state.Volume{ID: id, Name: id, Type: params.typ, CapacityBytes: size, Node: n.cfg.NodeID, CreatedAt: time.Now().UTC()}
	want := &state.Publish{
		VolumeID:   id,
		TargetPath: filepath.Clean(req.GetTargetPath()),
		ReadOnly:   req.GetReadonly(),
		MountFlags: vc.GetMount().GetMountFlags(),
		AccessMode: int32(vc.GetAccessMode().GetMode()),
		Ephemeral:  true,
		Phase:      state.PhasePending,
	}
	if params.typ == state.TypeBlock {
		want.FsType = fsTypeOf(vc, params.fsType)
		v.FsType = want.FsType
	} else {
		want.StagingPath = b.VolumePath(id) // the bind source
	}
	create := func() error {
		// The record is the intent: durable before any byte exists, it names what a
		// restart removes if the publish never completes.
		if err := n.admitEphemeral(v); err != nil {
			return err
		}
		if err := b.CreateVolume(id, size, ""); err != nil {
			return err
		}
		if params.typ == state.TypeBlock {
			dev, err := n.loops.Attach(ctx, b.VolumePath(id))
			if err != nil {
				return err
			}
			want.Device = dev
		}
		return nil
	}
	if have := n.publish(want.TargetPath); have != nil && have.VolumeID == id && have.Phase == state.PhaseDone {
		// A retry: keep the device and bind source the first call chose.
		want.Device, want.StagingPath = have.Device, have.StagingPath
		create = nil
	}
	return n.publishWith(ctx, want, func() error { return n.mountPublish(want) }, create)
}

// ephemeralSize is the size of an inline volume from its size attribute, or the default
// without one: a pod's manifest chooses it, so it is checked before any arithmetic on it.
func ephemeralSize(attrs map[string]string, params volumeParams) (int64, error) {
	size := DefaultVolumeSize
	if attr, ok := attrs[ContextSize]; ok {
		q, err := sizes.Parse(attr)
		if err != nil {
			return 0, status.Errorf(codes.InvalidArgument, "volume attribute %s=%q: want a positive quantity such as 1Gi", ContextSize, attr)
		}
		// Not Value(), which wraps or saturates beyond int64 ("1e30" is 0).
		if size, err = sizes.Bytes("volume attribute "+ContextSize, q); err != nil {
			code := codes.OutOfRange
			if re := (*sizes.RangeError)(nil); errors.As(err, &re) && re.Problem == sizes.NotPositive {
				code = codes.InvalidArgument
			}
			return 0, status.Error(code, err.Error())
		}
	}
	return volumeSize(&csi.CapacityRange{RequiredBytes: size}, minSize(params.typ, params.fsType))
}

// ephemeralHolds is what the node's inline ephemeral volumes of type typ hold in the pool,
// except the one named skip (a retried publish re-admits its own volume).
func ephemeralHolds(st *state.Node, l backend.Layout, typ, skip string) []hold {
	var out []hold
	b, _ := backend.New(typ, l)
	for id, v := range st.Ephemeral {
		if v.Type == typ && id != skip {
			out = append(out, hold{bytes: v.CapacityBytes, image: b.VolumePath(id)})
		}
	}
	return out
}

// holds is what the node's records hold, for the controller's view of the pool. It takes
// n.mu, which nothing holds while it waits for the controller's lock.
func (n *node) holds(typ string) []hold {
	n.mu.Lock()
	defer n.mu.Unlock()
	return ephemeralHolds(n.st, n.ephLayout, typ, "")
}

// admitEphemeral records an inline ephemeral volume if its size fits in the pool
// (RESOURCE_EXHAUSTED if not), and returns once the record is durable. A pod's volume
// attributes choose the size, so without this check one pod could fill the host.
func (n *node) admitEphemeral(v *state.Volume) error {
	n.pool.mu.Lock()
	var all []hold
	if n.peer != nil {
		all = n.peer(v.Type) // the controller's lock, before n.mu: the order every path keeps
	}
	n.mu.Lock()
	all = append(all, ephemeralHolds(n.st, n.ephLayout, v.Type, v.ID)...)
	if err := n.pool.fits(v.Type, v.CapacityBytes, all); err != nil {
		n.mu.Unlock()
		n.pool.mu.Unlock()
		return err
	}
	n.st.Ephemeral[v.ID] = v
	n.pool.mu.Unlock()
	return n.commitUnlock()
}

// ephemeralMounted explains which mounts use ephemeral volume id, or "".
func (n *node) ephemeralMounted(ctx context.Context, id string) (string, error) {
	ref, err := n.resolve(id)
	if err != nil {
		return "", err
	}
	dev := ""
	if ref.typ == state.TypeBlock {
		if dev, err = n.loops.Find(ctx, ref.path); err != nil {
			return "", err
		}
	}
	return mountedFrom(ref.path, dev)
}

// destroyEphemeral deletes an ephemeral volume: its loop device, its bytes, its record.
func (n *node) destroyEphemeral(ctx context.Context, id string) error {
	n.mu.Lock()
	v := n.st.Ephemeral[id]
	n.mu.Unlock()
	if v == nil {
		return nil
	}
	b, err := backend.New(v.Type, n.ephLayout)
	if err != nil {
		return err
	}
	if v.Type == state.TypeBlock {
		dev, err := n.loops.Find(ctx, b.VolumePath(id))
		if err != nil {
			return err
		}
		if dev != "" {
			if err := n.loops.Detach(ctx, dev); err != nil {
				return err
			}
		}
	}
	if err := b.DeleteVolume(id); err != nil {
		return err
	}
	return n.update(func(st *state.Node) { delete(st.Ephemeral, id) })
}
