package snapshotter

import (
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func apiextensionsClient() (apiextensionsclient.Interface, error) {
	return apiextensionsclient.NewForConfig(framework.RESTConfig())
}
