// Package apicheck asks the apiserver, through discovery, which of the APIs a sidecar uses
// it serves, so that on an older Kubernetes the sidecar turns off each feature it cannot
// serve there and says so in one line, and exits with one line when an API it cannot work
// without is missing. Upstream's sidecars do the same piecemeal (external-resizer's check
// for VolumeAttributesClass, the snapshot-controller's wait for its CRDs).
package apicheck

import (
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// Resource is an API resource: its group version and plural name.
type Resource struct {
	GroupVersion string
	Name         string
}

func (r Resource) String() string { return r.GroupVersion + " " + r.Name }

// Feature is a part of a sidecar that needs resources beyond the required ones.
type Feature struct {
	Name  string
	Needs []Resource
}

// Result is what Check found.
type Result struct {
	// Server is the apiserver's version (/version), or "unknown".
	Server string
	// Off are the features turned off, each with the first resource it lacks.
	Off []Off
}

// Off is a feature turned off and why.
type Off struct {
	Feature string
	Missing Resource
}

// On reports whether feature may run.
func (r Result) On(feature string) bool {
	return !slices.ContainsFunc(r.Off, func(o Off) bool { return o.Feature == feature })
}

// Line is the one log line a sidecar writes at start.
func (r Result) Line(component string) string {
	if len(r.Off) == 0 {
		return fmt.Sprintf("%s: Kubernetes %s serves every API it uses", component, r.Server)
	}
	parts := make([]string, len(r.Off))
	for i, o := range r.Off {
		parts[i] = fmt.Sprintf("%s (no %s)", o.Feature, o.Missing)
	}
	return fmt.Sprintf("%s: Kubernetes %s lacks APIs, turned off: %s", component, r.Server, strings.Join(parts, "; "))
}

// NotServedError is Check's error for a required resource the apiserver does not serve:
// unlike a discovery that failed, asking again will not help.
type NotServedError struct {
	Component string
	Server    string
	Resource  Resource
}

func (e *NotServedError) Error() string {
	return fmt.Sprintf("%s cannot run on Kubernetes %s: it does not serve %s", e.Component, e.Server, e.Resource)
}

// Check fetches each group version once. A required resource that is not served is an error
// naming it; a feature whose resources are not all served is turned off. Any other
// discovery error (the apiserver unreachable) is returned as is.
func Check(d discovery.DiscoveryInterface, component string, required []Resource, features []Feature) (Result, error) {
	res := Result{Server: "unknown"}
	if v, err := d.ServerVersion(); err == nil {
		res.Server = v.GitVersion
	}
	served := map[string]map[string]bool{}
	has := func(r Resource) (bool, error) {
		names, ok := served[r.GroupVersion]
		if !ok {
			names = map[string]bool{}
			list, err := d.ServerResourcesForGroupVersion(r.GroupVersion)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return false, fmt.Errorf("%s: discovery of %s: %w", component, r.GroupVersion, err)
			default:
				for _, ar := range list.APIResources {
					names[ar.Name] = true
				}
			}
			served[r.GroupVersion] = names
		}
		return names[r.Name], nil
	}
	for _, r := range required {
		ok, err := has(r)
		if err != nil {
			return res, err
		}
		if !ok {
			return res, &NotServedError{Component: component, Server: res.Server, Resource: r}
		}
	}
	for _, f := range features {
		for _, r := range f.Needs {
			ok, err := has(r)
			if err != nil {
				return res, err
			}
			if !ok {
				res.Off = append(res.Off, Off{Feature: f.Name, Missing: r})
				break
			}
		}
	}
	return res, nil
}

// The resources kubevol's sidecars use, with the release that made each GA.
var (
	PersistentVolumes      = Resource{"v1", "persistentvolumes"}
	PersistentVolumeClaims = Resource{"v1", "persistentvolumeclaims"}
	StorageClasses         = Resource{"storage.k8s.io/v1", "storageclasses"}
	VolumeAttachments      = Resource{"storage.k8s.io/v1", "volumeattachments"}    // 1.13
	CSINodes               = Resource{"storage.k8s.io/v1", "csinodes"}             // 1.17
	CSIStorageCapacities   = Resource{"storage.k8s.io/v1", "csistoragecapacities"} // 1.24
	// VolumeAttributesClasses are GA (storage.k8s.io/v1) since 1.34; upstream's v6
	// sidecars use only v1.
	VolumeAttributesClasses = Resource{"storage.k8s.io/v1", "volumeattributesclasses"}
	// PodCertificateRequests back the podCertificate projected volume source (KEP-4317):
	// certificates.k8s.io/v1 since 1.37, v1beta1 and off by default before.
	PodCertificateRequests = Resource{"certificates.k8s.io/v1", "podcertificaterequests"}
	// The snapshot and group snapshot APIs are CRDs (external-snapshotter v8's client/config).
	VolumeSnapshots             = Resource{"snapshot.storage.k8s.io/v1", "volumesnapshots"}
	VolumeSnapshotContents      = Resource{"snapshot.storage.k8s.io/v1", "volumesnapshotcontents"}
	VolumeSnapshotClasses       = Resource{"snapshot.storage.k8s.io/v1", "volumesnapshotclasses"}
	VolumeGroupSnapshots        = Resource{"groupsnapshot.storage.k8s.io/v1", "volumegroupsnapshots"}
	VolumeGroupSnapshotContents = Resource{"groupsnapshot.storage.k8s.io/v1", "volumegroupsnapshotcontents"}
	VolumeGroupSnapshotClasses  = Resource{"groupsnapshot.storage.k8s.io/v1", "volumegroupsnapshotclasses"}
)

// Served reports whether the apiserver serves r, and its version.
func Served(d discovery.DiscoveryInterface, r Resource) (bool, string, error) {
	res, err := Check(d, "", nil, []Feature{{Name: r.String(), Needs: []Resource{r}}})
	if err != nil {
		return false, res.Server, err
	}
	return res.On(r.String()), res.Server, nil
}
