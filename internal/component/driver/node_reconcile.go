package driver

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// reconcile brings the node's records and the system back in line after a start:
//   - operations interrupted by a crash (pending records) are rolled back, undos in
//     progress (removing records) are finished: the CO never saw them succeed, or asked
//     for them to be undone;
//   - completed stages and publishes are repaired when their loop device or mount is gone,
//     as after a reboot;
//   - loop devices on kubevol images that no record explains are detached, ephemeral
//     volumes whose record no publish explains are deleted, and ephemeral data that no
//     record names is quarantined.
func (n *node) reconcile(ctx context.Context) error {
	if err := n.file.RemoveTemps(); err != nil {
		return err
	}
	n.mu.Lock()
	stages := make([]state.Stage, 0, len(n.st.Stages))
	for _, s := range n.st.Stages {
		stages = append(stages, *s)
	}
	publishes := make([]state.Publish, 0, len(n.st.Publishes))
	for _, p := range n.st.Publishes {
		publishes = append(publishes, *p)
	}
	n.mu.Unlock()

	// Publishes are undone before stages and stages repaired before publishes, the order of
	// the CSI lifecycle.
	for _, p := range publishes {
		if p.Phase == state.PhaseDone {
			continue
		}
		n.log.Info("Rolling back an interrupted publish", "volumeID", p.VolumeID, "target", p.TargetPath, "phase", p.Phase)
		if err := n.teardownPublish(ctx, &p); err != nil {
			return err
		}
		if err := n.update(func(st *state.Node) { delete(st.Publishes, p.TargetPath) }); err != nil {
			return err
		}
	}
	for _, s := range stages {
		ref, err := n.resolve(s.VolumeID)
		if err != nil {
			ref = nil
		}
		if s.Phase == state.PhaseDone {
			if ref == nil {
				n.log.Error(err, "A staged volume has lost its data", "volumeID", s.VolumeID)
				continue
			}
			if err := n.repairStage(ctx, ref, &s); err != nil {
				n.log.Error(err, "Cannot repair a stage", "volumeID", s.VolumeID)
			}
			continue
		}
		n.log.Info("Rolling back an interrupted stage", "volumeID", s.VolumeID, "path", s.StagingPath, "phase", s.Phase)
		if err := n.teardownStage(ctx, ref, &s); err != nil {
			return err
		}
		if err := n.update(func(st *state.Node) { delete(st.Stages, s.VolumeID) }); err != nil {
			return err
		}
	}
	for _, p := range publishes {
		if p.Phase != state.PhaseDone {
			continue
		}
		cur := p
		if !p.Ephemeral && p.Block {
			if s := n.stage(p.VolumeID); s != nil {
				cur.Device = s.Device // a repaired stage may have a new device
			}
		}
		if p.Ephemeral && p.Device != "" {
			if ref, err := n.resolve(p.VolumeID); err == nil {
				if dev, err := n.loops.Attach(ctx, ref.path); err == nil {
					cur.Device = dev
				}
			}
		}
		if cur.Device != p.Device {
			if err := n.putPublish(&cur); err != nil {
				return err
			}
		}
		if err := n.mountPublish(&cur); err != nil {
			n.log.Error(err, "Cannot repair a publish", "volumeID", p.VolumeID, "target", p.TargetPath)
		}
	}
	if err := n.removeOrphanEphemeral(ctx); err != nil {
		return err
	}
	if err := n.detachOrphanLoops(ctx); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.log.Info("Node state loaded", "stages", len(n.st.Stages), "publishes", len(n.st.Publishes), "ephemeral", len(n.st.Ephemeral))
	return nil
}

// removeOrphanEphemeral deletes ephemeral volumes that no publish refers to: created by a
// publish that crashed before its record, or whose unpublish crashed half-way.
func (n *node) removeOrphanEphemeral(ctx context.Context) error {
	n.mu.Lock()
	used := map[string]bool{}
	for _, p := range n.st.Publishes {
		used[p.VolumeID] = true
	}
	var orphans []string
	for id := range n.st.Ephemeral {
		if !used[id] {
			orphans = append(orphans, id)
		}
	}
	n.mu.Unlock()
	for _, id := range orphans {
		// A record restored from a backup may lack the publish of a volume still mounted.
		if why, err := n.ephemeralMounted(ctx, id); err != nil || why != "" {
			n.log.Error(err, "Keeping an ephemeral volume no publish record names, because it is mounted", "volumeID", id, "reason", why)
			continue
		}
		n.log.Info("Deleting an ephemeral volume no pod uses", "volumeID", id)
		if err := n.destroyEphemeral(ctx, id); err != nil {
			return err
		}
	}
	entries, err := backend.Scan(n.ephLayout.Volumes)
	if err != nil {
		return err
	}
	for _, e := range entries {
		_, err := n.resolveEphemeral(e.ID)
		switch {
		case err == nil && !e.Partial:
		case err == nil:
			n.log.Info("Removing the partial copy of an interrupted ephemeral volume", "path", e.Path)
			if err := backend.RemoveEntry(e); err != nil {
				return err
			}
		default:
			// No record names it: it may be a volume whose record was lost.
			if err := quarantine(n.log, n.cfg.StateDir, "ephemeral", e); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *node) resolveEphemeral(id string) (*state.Volume, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.st.Ephemeral[id]; ok {
		return v, nil
	}
	return nil, errNotRecorded
}

// detachOrphanLoops detaches loop devices backed by kubevol images that no stage or publish
// holds and nothing mounts: attached by an operation killed before it could record it.
func (n *node) detachOrphanLoops(ctx context.Context) error {
	devs, err := n.loops.List(ctx)
	if err != nil {
		return err
	}
	mt, err := readMountTable()
	if err != nil {
		return err
	}
	n.mu.Lock()
	held := map[string]bool{}
	for _, s := range n.st.Stages {
		held[s.Device] = true
	}
	for _, p := range n.st.Publishes {
		held[p.Device] = true
	}
	n.mu.Unlock()
	for _, d := range devs {
		if held[d.Name] || !n.ownsImage(d.BackFile) || n.otherNodesImage(d.BackFile) {
			continue
		}
		if len(mt.mountsOfDevice(d.Name)) > 0 || len(mt.bindsOf(d.Name)) > 0 {
			n.log.Info("Keeping an unrecorded loop device because it is mounted", "device", d.Name, "image", d.BackFile)
			continue
		}
		n.log.Info("Detaching a loop device no record explains", "device", d.Name, "image", d.BackFile)
		if err := n.loops.Detach(ctx, d.Name); err != nil {
			return err
		}
	}
	return nil
}

func (n *node) ownsImage(p string) bool {
	for _, dir := range []string{n.layout.Volumes, n.ephLayout.Volumes} {
		if strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// otherNodesImage reports whether p is the image of a volume the controller placed on
// another node (--topology-nodes): that node's instance, on this same machine, holds its
// loop devices, and one it is still staging is not yet mounted. A network volume may be
// any node's: a loop device of its image this node's records do not hold is another's.
func (n *node) otherNodesImage(p string) bool {
	if !strings.HasPrefix(p, n.layout.Volumes+string(filepath.Separator)) {
		return false
	}
	v := n.catalog(strings.TrimSuffix(filepath.Base(p), filepath.Ext(p)))
	return v != nil && (v.Network || v.Node != "" && v.Node != n.cfg.NodeID)
}
