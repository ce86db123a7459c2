package api

import (
	"context"
	"github.com/kilnci/kiln/internal/artifacts"
	"io"
	"net/http"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Artifacts is what the API reads of runs' artifacts (artifacts.Service).
type Artifacts interface {
	List(ctx context.Context, runID string) ([]store.Artifact, error)
	Open(ctx context.Context, runID, name string) (io.ReadCloser, store.Artifact, error)
}

// Artifact is one artifact a job of a run uploaded.
type Artifact struct {
	Name      string    `json:"name"`
	Job       string    `json:"job"`
	JobID     string    `json:"job_id"`
	Size      int64     `json:"size"` // bytes, as stored (a gzipped tar)
	CreatedAt time.Time `json:"created_at"`
}

// ArtifactList is the answer of GET /runs/{run}/artifacts.
type ArtifactList struct {
	Artifacts []Artifact `json:"artifacts"`
}

func (s *server) artifactsOf(r *http.Request) (store.Run, error) {
	if s.Artifacts == nil {
		return store.Run{}, errorf(codeNotFound, "this server keeps no artifacts")
	}
	return s.findRun(r.Context(), r.PathValue("run"))
}

func (s *server) listArtifacts(w http.ResponseWriter, r *http.Request) error {
	run, err := s.artifactsOf(r)
	if err != nil {
		return err
	}
	arts, err := s.Artifacts.List(r.Context(), run.ID)
	if err != nil {
		return err
	}
	out := ArtifactList{Artifacts: []Artifact{}}
	for _, a := range arts {
		out.Artifacts = append(out.Artifacts, Artifact{Name: a.Name, Job: a.JobName, JobID: a.JobID, Size: a.Size, CreatedAt: a.CreatedAt})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getArtifact streams an artifact: a gzipped tar of its files.
func (s *server) getArtifact(w http.ResponseWriter, r *http.Request) error {
	run, err := s.artifactsOf(r)
	if err != nil {
		return err
	}
	body, art, err := s.Artifacts.Open(r.Context(), run.ID, r.PathValue("name"))
	if err != nil {
		if kiln.ErrorCode(err) == kiln.CodeNotFound {
			return errorf(codeNotFound, "run #%d has no artifact %q", run.Number, r.PathValue("name"))
		}
		return err
	}
	defer body.Close()
	w.Header().Set("Content-Disposition", `attachment; filename="artifact.tar.gz"`)
	artifacts.Serve(w, body, art.Size, s.cfg.LogWriteTimeout)
	return nil
}
