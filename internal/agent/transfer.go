package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/proto"
)

// transfer is the agent's own small client for a job's artifacts and
// caches: it
// streams them to and from the orchestrator it is connected to, which
// stores them (the agent never holds storage credentials). It sends the
// agent's token and id; the orchestrator checks that this agent holds the
// job under this lease epoch.
type transfer struct {
	base    string // http(s)://host[/prefix]/agent/v1/jobs/<job>
	epoch   string
	token   string
	agentID string
}

var _ executor.Transfer = (*transfer)(nil)

// httpBase turns the agent's WebSocket URL into the orchestrator's HTTP
// base URL.
func httpBase(wsURL string) (string, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	u.Path = strings.TrimSuffix(u.Path, proto.Path)
	u.RawPath = ""
	return strings.TrimRight(u.String(), "/"), nil
}

// Transfer gives the executor the job's transfer client (execPrepared asks
// the sink for it).
func (s *jobSink) Transfer() executor.Transfer {
	base, err := httpBase(s.a.url)
	if err != nil {
		return nil
	}
	return &transfer{
		base:  base + "/agent/v1/jobs/" + url.PathEscape(s.j.id),
		epoch: strconv.FormatInt(s.j.epoch, 10), token: s.a.cfg.Token, agentID: s.a.id,
	}
}

func (t *transfer) request(ctx context.Context, method, path, query string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, t.base+path+"?epoch="+t.epoch+query, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.token)
	req.Header.Set("X-Kiln-Agent", t.agentID)
	if body != nil {
		req.Header.Set("Content-Type", "application/gzip")
		req.ContentLength = -1 // streamed
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		err := responseError(resp)
		if resp.StatusCode == http.StatusConflict {
			err = fmt.Errorf("%w: %v", errConflict, err)
		}
		return nil, err
	}
	return resp, nil
}

// errConflict marks an orchestrator's 409 answer.
var errConflict = errors.New("conflict")

// responseError reads the orchestrator's JSON error ({"error": {"message"}})
// or says the status.
func responseError(resp *http.Response) error {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e) == nil && e.Error.Message != "" {
		return errors.New(e.Error.Message)
	}
	return fmt.Errorf("the orchestrator answered %s", resp.Status)
}

func (t *transfer) Upload(ctx context.Context, name string, body io.Reader) error {
	resp, err := t.request(ctx, http.MethodPut, "/artifacts/"+url.PathEscape(name), "", body)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.Body.Close()
}

func (t *transfer) Fetchable(ctx context.Context) ([]string, error) {
	resp, err := t.request(ctx, http.MethodGet, "/needs/artifacts", "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct {
		Artifacts []struct {
			Name string `json:"name"`
		} `json:"artifacts"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("the list of artifacts: %w", err)
	}
	names := make([]string, 0, len(list.Artifacts))
	for _, a := range list.Artifacts {
		names = append(names, a.Name)
	}
	return names, nil
}

func (t *transfer) Download(ctx context.Context, name string) (io.ReadCloser, error) {
	resp, err := t.request(ctx, http.MethodGet, "/artifacts/"+url.PathEscape(name), "", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

var _ executor.CacheTransfer = (*transfer)(nil)

// cacheQuery is the query of a cache request beyond the epoch.
func cacheQuery(key string, restoreKeys []string) string {
	q := url.Values{"key": {key}}
	for _, rk := range restoreKeys {
		q.Add("restore", rk)
	}
	return "&" + q.Encode()
}

func (t *transfer) RestoreCache(ctx context.Context, key string, restoreKeys []string) (io.ReadCloser, executor.CacheHit, bool, error) {
	resp, err := t.request(ctx, http.MethodGet, "/cache", cacheQuery(key, restoreKeys), nil)
	if err != nil {
		return nil, executor.CacheHit{}, false, err
	}
	if resp.StatusCode == http.StatusNoContent {
		resp.Body.Close()
		return nil, executor.CacheHit{Searched: resp.Header.Get("Kiln-Cache-Searched")}, false, nil
	}
	hit := executor.CacheHit{Key: resp.Header.Get("Kiln-Cache-Key"), Scope: resp.Header.Get("Kiln-Cache-Scope"),
		Exact: resp.Header.Get("Kiln-Cache-Exact") == "true"}
	return resp.Body, hit, true, nil
}

func (t *transfer) SaveCache(ctx context.Context, key string, body io.Reader) error {
	resp, err := t.request(ctx, http.MethodPut, "/cache", cacheQuery(key, nil), body)
	if errors.Is(err, errConflict) {
		return executor.ErrCacheTaken
	}
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.Body.Close()
}
