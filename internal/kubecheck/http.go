package kubecheck

import (
	"fmt"
	"io"
	"net/http"
)

// Get returns the body of the page at url (a metrics or health endpoint of a component);
// any status but 200 OK is an error that carries the body.
func Get(url string) (string, error) {
	rsp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer rsp.Body.Close()
	body, err := io.ReadAll(rsp.Body)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if rsp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s %s", url, rsp.Status, body)
	}
	return string(body), nil
}
