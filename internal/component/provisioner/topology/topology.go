// Package topology builds the CreateVolume accessibility requirements (requisite and
// preferred) from the CSINode topology keys, the Node labels, the StorageClass's
// allowedTopologies and the selected node, following external-provisioner's rules for
// strict and non-strict, late and immediate binding.
package topology

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Input is what the requirements are computed from.
type Input struct {
	Driver string
	// AllowedTopologies is the StorageClass's field.
	AllowedTopologies []corev1.TopologySelectorTerm
	// SelectedNode and its CSINode are set for late binding.
	SelectedNode    *corev1.Node
	SelectedCSINode *storagev1.CSINode
	// Nodes and CSINodes are the cluster's, for aggregation.
	Nodes    []*corev1.Node
	CSINodes []*storagev1.CSINode
	// Strict is --strict-topology; Immediate is --immediate-topology.
	Strict, Immediate bool
	// ClaimName spreads immediate-binding volumes of a StatefulSet over the segments.
	ClaimName string
}

// ErrNoTopology means the cluster offers no topology for the driver: usually its node
// plugin is not registered on any node.
var ErrNoTopology = errors.New("no available topology found")

type segment map[string]string

// Requirements returns nil when no requirement applies.
func Requirements(in Input) (*csi.TopologyRequirement, error) {
	if in.SelectedNode != nil {
		return lateBinding(in)
	}
	var req []segment
	switch {
	case len(in.AllowedTopologies) > 0:
		req = flatten(in.AllowedTopologies)
	case in.Immediate:
		keys := randomKeys(in.CSINodes, in.Driver)
		if len(keys) == 0 {
			return nil, fmt.Errorf("%w: no CSINode lists topology keys for driver %s; is its node plugin registered?", ErrNoTopology, in.Driver)
		}
		req = aggregate(keys, in.Nodes, in.CSINodes, in.Driver)
		if len(req) == 0 {
			return nil, fmt.Errorf("%w: topologyKeys %v were not found on any nodes", ErrNoTopology, keys)
		}
	default:
		return nil, nil
	}
	req = sortUnique(req)
	pref := rotate(req, spreadOffset(in.ClaimName, len(req)))
	return toCSI(req, pref), nil
}

func lateBinding(in Input) (*csi.TopologyRequirement, error) {
	node := in.SelectedNode
	keys := driverKeys(in.SelectedCSINode, in.Driver)
	if len(keys) == 0 {
		return nil, fmt.Errorf("no topology key found for node %s: the CSINode does not list driver %s with topology keys; is its node plugin registered there?", node.Name, in.Driver)
	}
	selected := segment{}
	for _, k := range keys {
		v, ok := node.Labels[k]
		if !ok {
			return nil, fmt.Errorf("topology labels from selected node %s do not match topology keys %v: label %s is missing", node.Name, keys, k)
		}
		selected[k] = v
	}
	var req []segment
	switch {
	case in.Strict:
		if len(in.AllowedTopologies) > 0 && !slices.ContainsFunc(flatten(in.AllowedTopologies), func(s segment) bool { return subset(selected, s) }) {
			return nil, fmt.Errorf("selected node %s (topology %v) is not in the StorageClass's allowedTopologies", node.Name, selected)
		}
		return toCSI([]segment{selected}, []segment{selected}), nil
	case len(in.AllowedTopologies) > 0:
		req = flatten(in.AllowedTopologies)
	default:
		req = aggregate(keys, in.Nodes, in.CSINodes, in.Driver)
	}
	req = sortUnique(req)
	if len(req) == 0 {
		return nil, fmt.Errorf("%w for node %s", ErrNoTopology, node.Name)
	}
	first := slices.IndexFunc(req, func(s segment) bool { return subset(selected, s) || subset(s, selected) })
	return toCSI(req, rotate(req, max(first, 0))), nil
}

func driverKeys(n *storagev1.CSINode, driver string) []string {
	if n == nil {
		return nil
	}
	for _, d := range n.Spec.Drivers {
		if d.Name == driver {
			return d.TopologyKeys
		}
	}
	return nil
}

func randomKeys(nodes []*storagev1.CSINode, driver string) []string {
	var withKeys [][]string
	for _, n := range nodes {
		if k := driverKeys(n, driver); len(k) > 0 {
			withKeys = append(withKeys, k)
		}
	}
	if len(withKeys) == 0 {
		return nil
	}
	return withKeys[rand.IntN(len(withKeys))]
}

// aggregate is the segment of every node whose driver reports the same keys and whose
// labels carry them all.
func aggregate(keys []string, nodes []*corev1.Node, csiNodes []*storagev1.CSINode, driver string) []segment {
	registered := map[string]bool{}
	for _, cn := range csiNodes {
		if k := driverKeys(cn, driver); len(k) > 0 && sameSet(k, keys) {
			registered[cn.Name] = true
		}
	}
	var out []segment
	for _, n := range nodes {
		if !registered[n.Name] {
			continue
		}
		s := segment{}
		for _, k := range keys {
			v, ok := n.Labels[k]
			if !ok {
				break
			}
			s[k] = v
		}
		if len(s) == len(keys) {
			out = append(out, s)
		}
	}
	return out
}

// flatten expands allowedTopologies into segments: the cross product of each term's values.
func flatten(terms []corev1.TopologySelectorTerm) []segment {
	var out []segment
	for _, t := range terms {
		segs := []segment{{}}
		for _, e := range t.MatchLabelExpressions {
			var next []segment
			for _, s := range segs {
				for _, v := range e.Values {
					c := maps.Clone(s)
					c[e.Key] = v
					next = append(next, c)
				}
			}
			segs = next
		}
		out = append(out, segs...)
	}
	return out
}

func subset(small, big segment) bool {
	for k, v := range small {
		if big[k] != v {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func (s segment) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s)) {
		b.WriteString(k + "=" + s[k] + ",")
	}
	return b.String()
}

func sortUnique(in []segment) []segment {
	seen := map[string]segment{}
	for _, s := range in {
		seen[s.String()] = s
	}
	keys := slices.Sorted(maps.Keys(seen))
	out := make([]segment, len(keys))
	for i, k := range keys {
		out[i] = seen[k]
	}
	return out
}

func rotate(in []segment, by int) []segment {
	if len(in) == 0 {
		return nil
	}
	by %= len(in)
	return append(slices.Clone(in[by:]), in[:by]...)
}

var ordinalRE = regexp.MustCompile(`^(.*)-(\d+)$`)

// spreadOffset places the claims of one StatefulSet (<template>-<set>-<ordinal>) on
// successive segments, as the in-tree volume plugins spread their zones.
func spreadOffset(claimName string, n int) int {
	if n == 0 {
		return 0
	}
	base, ord := claimName, 0
	if m := ordinalRE.FindStringSubmatch(claimName); m != nil {
		base = m[1]
		ord, _ = strconv.Atoi(m[2])
	}
	h := fnv.New32()
	h.Write([]byte(base))
	return int((uint64(h.Sum32()) + uint64(ord)) % uint64(n))
}

func toCSI(req, pref []segment) *csi.TopologyRequirement {
	conv := func(in []segment) []*csi.Topology {
		out := make([]*csi.Topology, len(in))
		for i, s := range in {
			out[i] = &csi.Topology{Segments: maps.Clone(s)}
		}
		return out
	}
	return &csi.TopologyRequirement{Requisite: conv(req), Preferred: conv(pref)}
}
