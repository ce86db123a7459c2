package caches

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// AgentHandler serves the agents' side (docs/protocol.md#caches):
//
//	GET /agent/v1/jobs/{job}/cache?epoch=N&key=K[&restore=P…]  restore: 200 with the body, or 204
//	PUT /agent/v1/jobs/{job}/cache?epoch=N&key=K               save (a gzipped tar): 201, 409 when taken
//
// each with the agent's token (Authorization: Bearer) and id
// (X-Kiln-Agent): only the agent holding the job under that lease epoch is
// served. A restore's answer names what it found in the headers
// Kiln-Cache-Key, Kiln-Cache-Scope and Kiln-Cache-Exact, or the scopes
// it searched in Kiln-Cache-Searched.
func (s *Service) AgentHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /agent/v1/jobs/{job}/cache", s.serve(s.restore))
	mux.HandleFunc("PUT /agent/v1/jobs/{job}/cache", s.serve(s.save))
	return mux
}

func (s *Service) serve(fn func(w http.ResponseWriter, r *http.Request, jobID string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := s.authorize(r)
		if err == nil {
			err = fn(w, r, r.PathValue("job"))
		}
		if err != nil {
			code := kiln.ErrorCode(err)
			if code == kiln.CodeInternal {
				s.cfg.Logger.Warn("caches: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeJSON(w, code.HTTPStatus(), kiln.BodyOf(err))
		}
	}
}

func (s *Service) authorize(r *http.Request) error {
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	agentID := r.Header.Get("X-Kiln-Agent")
	if !ok || secret == "" || agentID == "" {
		return kiln.Errorf(kiln.CodeUnauthorized, "an agent token (Authorization: Bearer) and agent id (X-Kiln-Agent) are required")
	}
	epoch, err := strconv.ParseInt(r.URL.Query().Get("epoch"), 10, 64)
	if err != nil || epoch < 1 {
		return kiln.Errorf(kiln.CodeInvalid, "epoch must be the job's lease epoch")
	}
	_, err = s.db.Artifacts().Holder(r.Context(), secret, agentID, r.PathValue("job"), epoch)
	return err
}

func (s *Service) restore(w http.ResponseWriter, r *http.Request, jobID string) error {
	q := r.URL.Query()
	if len(q["restore"]) > 16 {
		return kiln.Errorf(kiln.CodeInvalid, "at most 16 restore keys")
	}
	body, hit, ok, err := s.Restore(r.Context(), jobID, q.Get("key"), q["restore"])
	if err != nil {
		return err
	}
	if !ok {
		w.Header().Set("Kiln-Cache-Searched", strings.Join(hit.Searched, ", "))
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	defer body.Close()
	h := w.Header()
	h.Set("Kiln-Cache-Key", hit.Key)
	h.Set("Kiln-Cache-Scope", hit.Scope)
	h.Set("Kiln-Cache-Exact", strconv.FormatBool(hit.Exact))
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Length", strconv.FormatInt(hit.Size, 10))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	buf := make([]byte, 256<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.Idle))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the agent went away
			}
		}
		if err != nil {
			return nil
		}
	}
}

func (s *Service) save(w http.ResponseWriter, r *http.Request, jobID string) error {
	rc := http.NewResponseController(w)
	body := &progress{r: r.Body, extend: func() { _ = rc.SetReadDeadline(time.Now().Add(s.cfg.Idle)) }}
	saved, err := s.Save(r.Context(), jobID, r.URL.Query().Get("key"), body)
	if err != nil {
		return err
	}
	s.cfg.Logger.Debug("cache saved", "job", jobID, "key", saved.Key, "scope", saved.Scope, "bytes", saved.Size)
	writeJSON(w, http.StatusCreated, map[string]any{"key": saved.Key, "scope": saved.Scope, "size": saved.Size})
	return nil
}

// progress extends a deadline before every read.
type progress struct {
	r      io.Reader
	extend func()
}

func (p *progress) Read(b []byte) (int, error) {
	p.extend()
	return p.r.Read(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
