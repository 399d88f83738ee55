package emptydir

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// isHugePages: medium HugePages or HugePages-<size>, a hugetlbfs.
func isHugePages(m v1.StorageMedium) bool {
	return m == v1.StorageMediumHugePages || strings.HasPrefix(string(m), string(v1.StorageMediumHugePagesPrefix))
}

// hugePageSize is the page size of a hugetlbfs emptyDir, as the kubelet chooses it: the
// size in the medium (HugePages-2Mi), which some container must request
// (hugepages-2Mi), or with plain HugePages the one size every container requesting huge
// pages asks for. Pod-level requests (spec.resources, PodLevelResources, beta and on in
// 1.37) count as one more container's.
func hugePageSize(medium v1.StorageMedium, pod *v1.Pod) (resource.Quantity, error) {
	var want *resource.Quantity
	if medium != v1.StorageMediumHugePages {
		q, err := resource.ParseQuantity(strings.TrimPrefix(string(medium), string(v1.StorageMediumHugePagesPrefix)))
		if err != nil || q.Sign() <= 0 {
			return resource.Quantity{}, fmt.Errorf("medium %s: invalid huge page size", medium)
		}
		want = &q
	}
	var lists []v1.ResourceList
	if pod.Spec.Resources != nil {
		lists = append(lists, pod.Spec.Resources.Requests)
	}
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		lists = append(lists, c.Resources.Requests)
	}
	var found *resource.Quantity
	for _, requests := range lists {
		for name := range requests {
			if !strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
				continue
			}
			size, err := resource.ParseQuantity(strings.TrimPrefix(string(name), v1.ResourceHugePagesPrefix))
			if err != nil {
				continue
			}
			switch {
			case want != nil:
				if size.Cmp(*want) == 0 {
					found = &size
				}
			case found != nil && found.Cmp(size) != 0:
				return resource.Quantity{}, fmt.Errorf("medium: %s can't be used if container requests multiple huge page sizes", medium)
			default:
				found = &size
			}
		}
	}
	if found == nil {
		return resource.Quantity{}, fmt.Errorf("medium %s: hugePages storage requested, but there is no resource request for huge pages", medium)
	}
	return *found, nil
}
