// Package driver is kubevol's local-storage CSI driver: Identity, Controller and Node services
// over gRPC, backed by one directory (type "dir") or one loop-attached sparse image (type
// "block") per volume under a state directory.
//
// Other packages start it in-process with New and Run, or as `kubevol driver`.
package driver

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
)

// Mode selects which CSI services one process serves, so that a deployment can split them as
// a real cluster does: a controller Deployment and a node DaemonSet.
type Mode string

// Modes of the driver.
const (
	ModeController Mode = "controller"
	ModeNode       Mode = "node"
	ModeAll        Mode = "all"
)

// Defaults shared with the command line.
const (
	// DefaultDriverName is in the domain-name notation CSI GetPluginInfo requires, which is
	// also a valid name for the Kubernetes CSIDriver object: no "/" is allowed in either.
	DefaultDriverName = "local.kubevol.io"
	// TopologyKey is the segment key of the node that holds a volume.
	TopologyKey = "topology.kubevol.io/node"
	// DefaultCapacity is the size of the "dir" pool when none is configured.
	DefaultCapacity int64 = 100 << 30
	// DefaultVolumeSize is used when CreateVolume gives no capacity range.
	DefaultVolumeSize int64 = 1 << 30
)

// Config is everything a driver instance needs. The zero values of the optional fields are
// the defaults.
type Config struct {
	// DriverName is returned by GetPluginInfo; CSI requires a domain-like name.
	DriverName string
	// Version is returned by GetPluginInfo; it must not be empty.
	Version string
	// NodeID names this node; it is also the value of the topology segment.
	NodeID string
	// StateDir holds the records, the volumes and the snapshots. A controller and a node
	// process of the same node share it.
	StateDir string
	Mode     Mode
	// TopologyNodes, in controller or all mode, are the nodes whose segments the controller
	// provisions on: several node instances on one machine, each with its own NodeID, over
	// one controller whose volumes all live under its StateDir. Empty means NodeID alone;
	// NodeID is always one of them.
	TopologyNodes []string
	// ControllerStateDir, in node mode, is the controller's StateDir when it is not this
	// instance's: a node instance of TopologyNodes keeps its own records in StateDir and
	// reads the controller's records and volumes there. Empty means StateDir.
	ControllerStateDir string
	// Zone is further topology segments (key to value) that the node reports and that
	// every local volume is accessible from, beside TopologyKey: a zone of a cloud driver's
	// shape (topology.ebs.csi.aws.com/zone=us-east-1a), so that the driver can stand in for
	// a CSI migration target, whose translation derives the in-tree zone and region from
	// that key. Empty means none.
	Zone map[string]string
	// AttachRequired enables PUBLISH_UNPUBLISH_VOLUME, so that the CO's attach path runs.
	AttachRequired bool
	// MaxVolumesPerNode is reported by NodeGetInfo and enforced by ControllerPublishVolume;
	// 0 means no limit.
	MaxVolumesPerNode int64
	// MaxVolumesPerNodeFile, if set, names a file holding the count NodeGetInfo reports,
	// read at every call, so that a test can change it while the driver runs (the mutable
	// CSINode allocatable count); MaxVolumesPerNode stays the enforced limit.
	MaxVolumesPerNodeFile string
	// Capacity is the size of the "dir" pool in bytes; 0 means DefaultCapacity.
	Capacity int64
	// CallLog, if set, is a file that receives one JSON line per RPC.
	CallLog string
	// Faults are the injected failures; nil means none.
	Faults []FaultRule
	// Logger receives the driver's logs; the zero value means klog's global logger.
	Logger klog.Logger `json:"-"`
	// ShutdownGrace bounds how long Run waits for in-flight RPCs after its context ends.
	ShutdownGrace time.Duration
	// Recover is the operator's answer to a state directory whose records New refused;
	// see Recover. Leave it empty otherwise.
	Recover Recover
	// Without lists capabilities to switch off (WithoutNames), for testing COs against
	// drivers that lack them.
	Without []string

	off without
}

// driverNameRE is the CSI GetPluginInfo rule: at most 63 characters, alphanumeric at both
// ends, dashes, dots and alphanumerics between.
var driverNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9.]{0,61}[a-zA-Z0-9])?$`)

// Validate checks the configuration and fills in defaults. Errors name the offending
// setting in one line, for the command line to print.
func (c *Config) Validate() error {
	if c.DriverName == "" {
		c.DriverName = DefaultDriverName
	}
	if !driverNameRE.MatchString(c.DriverName) {
		return fmt.Errorf("--drivername %q: want domain-name notation such as %s (at most 63 characters; no \"/\")", c.DriverName, DefaultDriverName)
	}
	if c.Version == "" {
		c.Version = "unknown"
	}
	if c.NodeID == "" {
		return errors.New("--node-id is required")
	}
	if len(c.NodeID) > 128 {
		return fmt.Errorf("--node-id: longer than 128 bytes")
	}
	if c.StateDir == "" {
		return errors.New("--state-dir is required")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("--state-dir: %v", err)
	}
	c.StateDir = abs
	switch c.Mode {
	case "":
		c.Mode = ModeAll
	case ModeController, ModeNode, ModeAll:
	default:
		return fmt.Errorf("--mode %q: want controller, node or all", c.Mode)
	}
	if err := c.validateTopology(); err != nil {
		return err
	}
	if c.MaxVolumesPerNode < 0 {
		return fmt.Errorf("--max-volumes-per-node must not be negative, got %d", c.MaxVolumesPerNode)
	}
	if c.Capacity < 0 {
		return fmt.Errorf("--capacity must not be negative, got %d", c.Capacity)
	}
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	switch c.Recover {
	case RecoverNone, RecoverAdopt, RecoverQuarantine:
	default:
		return fmt.Errorf("--recover %q: want %s or %s", c.Recover, RecoverAdopt, RecoverQuarantine)
	}
	off, err := parseWithout(c.Without)
	if err != nil {
		return err
	}
	if off[WithoutControllerExpansion] && c.Mode != ModeAll {
		// The node grows the volume's bytes itself, so it must own the controller's records.
		return fmt.Errorf("--without %s needs --mode all", WithoutControllerExpansion)
	}
	c.off = off
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	return nil
}

func (c *Config) servesController() bool { return c.Mode == ModeController || c.Mode == ModeAll }
func (c *Config) servesNode() bool       { return c.Mode == ModeNode || c.Mode == ModeAll }

func (c *Config) validateTopology() error {
	if c.Mode == ModeNode && slices.ContainsFunc(c.TopologyNodes, func(n string) bool { return n != c.NodeID }) {
		return errors.New("--topology-nodes configures the controller; it needs --mode controller or all")
	}
	nodes := []string{c.NodeID}
	for _, n := range c.TopologyNodes {
		if n == "" || len(n) > 128 {
			return fmt.Errorf("--topology-nodes: %q is not a node ID", n)
		}
		if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	c.TopologyNodes = nodes
	for k, v := range c.Zone {
		// CSI: a segment key is a DNS-like name with an optional prefix, its value at most
		// 63 characters; the node labels carry them, so they are label keys and values too.
		if k == TopologyKey {
			return fmt.Errorf("--zone: %s is the driver's node segment", k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("--zone: key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 || v == "" {
			return fmt.Errorf("--zone: value %q of %s is not a label value", v, k)
		}
	}
	// Validate runs again in New: what it filled in must validate as given.
	if c.ControllerStateDir == "" {
		c.ControllerStateDir = c.StateDir
		return nil
	}
	abs, err := filepath.Abs(c.ControllerStateDir)
	if err != nil {
		return fmt.Errorf("--controller-state-dir: %v", err)
	}
	if c.ControllerStateDir = abs; abs != c.StateDir && c.Mode != ModeNode {
		return errors.New("--controller-state-dir is for a node instance; it needs --mode node")
	}
	return nil
}

// servedNodes names the nodes of TopologyNodes, for errors.
func (c *Config) servedNodes() string {
	if len(c.TopologyNodes) == 1 {
		return fmt.Sprintf("node %q", c.NodeID)
	}
	return fmt.Sprintf("nodes %q", c.TopologyNodes)
}

// servesSegment reports whether the controller provisions on node.
func (c *Config) servesSegment(node string) bool { return slices.Contains(c.TopologyNodes, node) }

// pickNode chooses the node of a new volume: the first preferred segment the controller
// serves, then the first such requisite one, as CSI asks a plugin to try the preferred
// topologies in order; no requisite segment means anywhere, and the controller's own node
// when no preferred one is served.
func (c *Config) pickNode(req *csi.TopologyRequirement) (string, bool) {
	for _, t := range append(slices.Clone(req.GetPreferred()), req.GetRequisite()...) {
		if v, ok := t.GetSegments()[TopologyKey]; ok && c.servesSegment(v) {
			return v, true
		}
	}
	return c.NodeID, len(req.GetRequisite()) == 0
}

// topology is the segment every kubevol volume and node reports: the node, and the Zone
// segments.
func (c *Config) topology() map[string]string { return c.topologyOf(c.NodeID) }

// topologyOf is the segment of a volume on node.
func (c *Config) topologyOf(node string) map[string]string {
	out := map[string]string{TopologyKey: node}
	for k, v := range c.Zone {
		out[k] = v
	}
	return out
}
