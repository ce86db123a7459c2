package api

import (
	"context"
	"io"
	"net/url"
)

// Artifacts lists the artifacts of a run (its number or id).
func (c *Client) Artifacts(ctx context.Context, run string) ([]Artifact, error) {
	var out ArtifactList
	_, err := c.do(ctx, "GET", "/api/v1/runs/"+url.PathEscape(run)+"/artifacts", nil, nil, &out)
	return out.Artifacts, err
}

// Artifact opens an artifact of a run: a gzipped tar of its files. The
// caller closes it.
func (c *Client) Artifact(ctx context.Context, run, name string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, "GET", "/api/v1/runs/"+url.PathEscape(run)+"/artifacts/"+url.PathEscape(name), nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
