// Package plugins lists kubevol's in-tree volume plugins.
package plugins

import (
	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/plugins/configmap"
	"github.com/kubevol/kubevol/pkg/volume/plugins/downwardapi"
	"github.com/kubevol/kubevol/pkg/volume/plugins/emptydir"
	"github.com/kubevol/kubevol/pkg/volume/plugins/hostpath"
	"github.com/kubevol/kubevol/pkg/volume/plugins/image"
	"github.com/kubevol/kubevol/pkg/volume/plugins/local"
	"github.com/kubevol/kubevol/pkg/volume/plugins/projected"
	"github.com/kubevol/kubevol/pkg/volume/plugins/secret"
)

// All returns a fresh instance of every in-tree plugin, ready for PluginManager.Register.
func All() []volume.Plugin {
	return []volume.Plugin{
		emptydir.New(), hostpath.New(), configmap.New(), secret.New(), downwardapi.New(), projected.New(),
		local.New(), image.New(),
	}
}
