package volume

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// PluginManager holds the registered plugins and finds the one for a spec
// (upstream: VolumePluginMgr).
type PluginManager struct {
	mu      sync.RWMutex
	plugins map[string]Plugin
	names   []string // sorted, for deterministic lookups and messages
	host    *host
}

// NewPluginManager returns a manager whose plugins get a Host built from cfg.
func NewPluginManager(cfg HostConfig) *PluginManager {
	pm := &PluginManager{plugins: map[string]Plugin{}}
	pm.host = &host{cfg: cfg, plugins: pm}
	return pm
}

// Register initialises and adds plugins. A duplicate or empty name is an error.
func (pm *PluginManager) Register(plugins ...Plugin) error {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	for _, p := range plugins {
		name := p.Name()
		if name == "" {
			return fmt.Errorf("volume plugin %T has an empty name", p)
		}
		if _, ok := pm.plugins[name]; ok {
			return fmt.Errorf("volume plugin %q registered twice", name)
		}
		if err := p.Init(pm.host); err != nil {
			return fmt.Errorf("init volume plugin %q: %w", name, err)
		}
		pm.plugins[name] = p
		pm.names = append(pm.names, name)
	}
	sort.Strings(pm.names)
	return nil
}

// FindBySpec returns the one plugin that supports spec.
func (pm *PluginManager) FindBySpec(spec *Spec) (Plugin, error) {
	if spec == nil {
		return nil, fmt.Errorf("no volume spec")
	}
	pm.mu.RLock()
	defer pm.mu.RUnlock()
	var found []Plugin
	for _, n := range pm.names {
		if p := pm.plugins[n]; p.CanSupport(spec) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		if t := spec.sourceType(); t != "" {
			return nil, fmt.Errorf("no volume plugin supports volume %q of type %s", spec.Name(), t)
		}
		return nil, fmt.Errorf("no volume plugin supports volume %q", spec.Name())
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, p := range found {
		names[i] = p.Name()
	}
	return nil, fmt.Errorf("several volume plugins support volume %q: %s", spec.Name(), strings.Join(names, ", "))
}

// FindByName returns the plugin registered as name.
func (pm *PluginManager) FindByName(name string) (Plugin, error) {
	pm.mu.RLock()
	defer pm.mu.RUnlock()
	p, ok := pm.plugins[name]
	if !ok {
		return nil, fmt.Errorf("no volume plugin named %q", name)
	}
	return p, nil
}

// FindDeviceMountable returns spec's plugin if it is device-mountable for spec, else nil.
func (pm *PluginManager) FindDeviceMountable(spec *Spec) (DeviceMountablePlugin, error) {
	p, err := pm.FindBySpec(spec)
	if err != nil {
		return nil, err
	}
	dm, ok := p.(DeviceMountablePlugin)
	if !ok {
		return nil, nil
	}
	can, err := dm.CanDeviceMount(spec)
	if err != nil || !can {
		return nil, err
	}
	return dm, nil
}

// FindAttachable returns spec's plugin if it is attachable for spec, else nil.
func (pm *PluginManager) FindAttachable(spec *Spec) (AttachablePlugin, error) {
	p, err := pm.FindBySpec(spec)
	if err != nil {
		return nil, err
	}
	ap, ok := p.(AttachablePlugin)
	if !ok {
		return nil, nil
	}
	can, err := ap.CanAttach(spec)
	if err != nil || !can {
		return nil, err
	}
	return ap, nil
}

// FindBlockByName returns the named plugin if it maps block volumes.
func (pm *PluginManager) FindBlockByName(name string) (BlockPlugin, error) {
	p, err := pm.FindByName(name)
	if err != nil {
		return nil, err
	}
	bp, ok := p.(BlockPlugin)
	if !ok {
		return nil, fmt.Errorf("volume plugin %s does not support block volumes", name)
	}
	return bp, nil
}

// FindExpandable returns spec's plugin if it expands volumes on the node, else nil.
func (pm *PluginManager) FindExpandable(spec *Spec) (ExpandablePlugin, error) {
	p, err := pm.FindBySpec(spec)
	if err != nil {
		return nil, err
	}
	ep, _ := p.(ExpandablePlugin)
	return ep, nil
}
