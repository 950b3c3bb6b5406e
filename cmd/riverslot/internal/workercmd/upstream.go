package workercmd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/riverslot/riverslot"
)

// upstreamCaller returns the worker's call of an account's upstream: GET
// base/<key> (nothing without base). A 2xx succeeds; a 429 is
// riverslot.Throttled for its Retry-After (seconds, default 1 s); anything
// else is an error that names the status.
func upstreamCaller(base string) func(ctx context.Context, key string) error {
	if base == "" {
		return func(context.Context, string) error { return nil }
	}
	client := &http.Client{Timeout: 30 * time.Second}
	return func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/"+url.PathEscape(key), nil)
		if err != nil {
			return err
		}
		// When the sync sent it: the limits bound sends; a server sees
		// them later by however long each took to reach it.
		req.Header.Set("X-Riverslot-Sent-At", time.Now().UTC().Format(time.RFC3339Nano))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			retry := time.Second
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
				retry = time.Duration(secs) * time.Second
			}
			return riverslot.Throttled(retry, fmt.Errorf("upstream %q answered 429", key))
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			return fmt.Errorf("upstream %q answered %d", key, resp.StatusCode)
		}
		return nil
	}
}
