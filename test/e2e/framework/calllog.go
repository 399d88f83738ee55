package framework

import (
	"testing"

	"github.com/kubevol/kubevol/internal/component/driver"
)

// DriverCalls returns the calls of the driver's call log at path that keep accepts, in
// order, each as "Method:Code".
func DriverCalls(t testing.TB, path string, keep func(driver.CallRecord) bool) []string {
	t.Helper()
	recs, err := driver.ReadCallLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if keep(r) {
			out = append(out, r.Method+":"+r.Code)
		}
	}
	return out
}
