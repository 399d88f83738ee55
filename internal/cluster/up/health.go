package up

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

var healthClient = &http.Client{Timeout: 2 * time.Second}

func probe(ctx context.Context, url string) error { return probeWith(ctx, healthClient, url) }

// probeWith GETs url with client and wants 200.
func probeWith(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
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

func (c *component) probe(ctx context.Context) error {
	if c.check != nil {
		return c.check(ctx)
	}
	return probe(ctx, c.health)
}
