package up

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

var healthClient = &http.Client{Timeout: 2 * time.Second}

func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, body)
	}
	return nil
}

// waitHealthy polls the component's /healthz during start-up only.
func waitHealthy(ctx context.Context, c *component, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := probe(ctx, c.health)
		if err == nil {
			return nil
		}
		select {
		case <-c.p.Done():
			return fmt.Errorf("exited before it became healthy (%v)", c.p.Err())
		case <-ctx.Done():
			return fmt.Errorf("not healthy after %s: %v", timeout, err)
		case <-tick.C:
		}
	}
}
