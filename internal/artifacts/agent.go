package artifacts

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// AgentHandler serves the agents' side (docs/protocol.md#artifacts):
//
//	PUT /agent/v1/jobs/{job}/artifacts/{name}?epoch=N   upload (a gzipped tar)
//	GET /agent/v1/jobs/{job}/needs/artifacts?epoch=N    what the job's direct needs uploaded
//	GET /agent/v1/jobs/{job}/artifacts/{name}?epoch=N   download one of the run's
//
// each with the agent's token (Authorization: Bearer) and id (X-Kiln-Agent):
// only the agent holding the job under that lease epoch is served.
func (s *Service) AgentHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /agent/v1/jobs/{job}/artifacts/{name}", s.serve(s.upload))
	mux.HandleFunc("GET /agent/v1/jobs/{job}/needs/artifacts", s.serve(s.needs))
	mux.HandleFunc("GET /agent/v1/jobs/{job}/artifacts/{name}", s.serve(s.download))
	return mux
}

// held is an authenticated agent request about a job it holds.
type held struct {
	runID, jobID string
}

func (s *Service) serve(fn func(w http.ResponseWriter, r *http.Request, h held) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h, err := s.authorize(r)
		if err == nil {
			err = fn(w, r, h)
		}
		if err != nil {
			s.fail(w, r, err)
		}
	}
}

func (s *Service) authorize(r *http.Request) (held, error) {
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	agentID := r.Header.Get("X-Kiln-Agent")
	if !ok || secret == "" || agentID == "" {
		return held{}, kiln.Errorf(kiln.CodeUnauthorized, "an agent token (Authorization: Bearer) and agent id (X-Kiln-Agent) are required")
	}
	epoch, err := strconv.ParseInt(r.URL.Query().Get("epoch"), 10, 64)
	if err != nil || epoch < 1 {
		return held{}, kiln.Errorf(kiln.CodeInvalid, "epoch must be the job's lease epoch")
	}
	jobID := r.PathValue("job")
	runID, err := s.db.Artifacts().Holder(r.Context(), secret, agentID, jobID, epoch)
	if err != nil {
		return held{}, err
	}
	return held{runID: runID, jobID: jobID}, nil
}

func (s *Service) upload(w http.ResponseWriter, r *http.Request, h held) error {
	rc := http.NewResponseController(w)
	body := &progress{r: r.Body, extend: func() { _ = rc.SetReadDeadline(time.Now().Add(s.cfg.Idle)) }}
	art, err := s.Store(r.Context(), h.runID, h.jobID, r.PathValue("name"), body)
	if err != nil {
		return err
	}
	s.cfg.Logger.Debug("artifact stored", "run", h.runID, "job", h.jobID, "name", art.Name, "bytes", art.Size)
	return writeJSON(w, http.StatusCreated, map[string]any{"name": art.Name, "size": art.Size})
}

func (s *Service) needs(w http.ResponseWriter, r *http.Request, h held) error {
	arts, err := s.db.Artifacts().OfNeeds(r.Context(), h.jobID)
	if err != nil {
		return err
	}
	type item struct {
		Name string `json:"name"`
		Job  string `json:"job"`
		Size int64  `json:"size"`
	}
	out := struct {
		Artifacts []item `json:"artifacts"`
	}{Artifacts: []item{}}
	for _, a := range arts {
		out.Artifacts = append(out.Artifacts, item{Name: a.Name, Job: a.JobName, Size: a.Size})
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Service) download(w http.ResponseWriter, r *http.Request, h held) error {
	body, art, err := s.Open(r.Context(), h.runID, r.PathValue("name"))
	if err != nil {
		return err
	}
	defer body.Close()
	Serve(w, body, art.Size, s.cfg.Idle)
	return nil
}

// Serve streams an artifact's body as the response, each write within
// idle (the server's whole-response timeout does not apply).
func Serve(w http.ResponseWriter, body io.Reader, size int64, idle time.Duration) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 256<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client went away
			}
		}
		if err != nil {
			return
		}
	}
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

func (s *Service) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := kiln.ErrorCode(err)
	if code == kiln.CodeInternal {
		s.cfg.Logger.Warn("artifacts: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	_ = writeJSON(w, code.HTTPStatus(), kiln.BodyOf(err))
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}
