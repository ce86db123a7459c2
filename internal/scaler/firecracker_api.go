package scaler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// fcClient speaks Firecracker's REST API on its unix socket: JSON bodies,
// 204 on success, an Error object {"fault_message": …} otherwise.
type fcClient struct {
	sock string
	http *http.Client
}

func newFCClient(sock string) *fcClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}
	return &fcClient{sock: sock, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// waitReady polls GET / until the API answers (item 62: the VMM creates
// its socket some time after it starts), for at most wait; the VMM
// exiting first ends the wait too.
func (c *fcClient) waitReady(ctx context.Context, wait time.Duration, exited <-chan struct{}) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		last = c.get(rctx, "/")
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("the VMM exited before its API socket %s answered", c.sock)
		case <-deadline.C:
			return fmt.Errorf("the API socket %s did not answer within socket_wait (%s): %v", c.sock, wait, last)
		case <-tick.C:
		}
	}
}

func (c *fcClient) get(ctx context.Context, path string) error {
	return c.do(ctx, http.MethodGet, path, nil)
}

func (c *fcClient) put(ctx context.Context, path string, body any) error {
	return c.do(ctx, http.MethodPut, path, body)
}

func (c *fcClient) do(ctx context.Context, method, path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return rootErr(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var fault struct {
		FaultMessage string `json:"fault_message"`
	}
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &fault) == nil && fault.FaultMessage != "" {
		msg = fault.FaultMessage
	}
	return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
}
