package api

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/store"
)

// SourceList is every configured source, by name, secrets redacted.
type SourceList struct {
	Sources []Source `json:"sources"`
}

func sourceDTO(st store.Source) (Source, error) {
	fs, err := ingress.Decode(st)
	if err != nil {
		return Source{}, err
	}
	policy := st.ForkPullRequests
	if policy == "" {
		policy = kiln.ForkApprove
	}
	return Source{Source: fs.Redacted(), ID: st.ID, CreatedAt: st.CreatedAt.UTC(), UpdatedAt: st.UpdatedAt.UTC(),
		ForkPullRequests: policy, ForkLabels: orEmptyLabels(st.ForkLabels), PublicBadges: st.PublicBadges}, nil
}

func (s *server) listSources(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	srcs, err := s.DB.Sources().List(r.Context())
	if err != nil {
		return err
	}
	out := SourceList{Sources: make([]Source, 0, len(srcs))}
	for _, st := range srcs {
		dto, err := sourceDTO(st)
		if err != nil {
			return err
		}
		out.Sources = append(out.Sources, dto)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) createSource(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req SourceRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	st, err := sourceRecord(&req)
	if err != nil {
		return err
	}
	created, err := s.DB.Sources().Create(r.Context(), st)
	if err != nil {
		return err
	}
	dto, err := sourceDTO(created)
	if err != nil {
		return err
	}
	dto.Warnings = s.CredentialWarnings(r.Context(), &req.Source)
	w.Header().Set("Location", "/api/v1/sources/"+created.Name)
	writeJSON(w, http.StatusCreated, dto)
	return nil
}

// sourceRecord validates a source request and turns it into what the
// store keeps.
func sourceRecord(req *SourceRequest) (store.Source, error) {
	if err := req.Validate(); err != nil {
		return store.Source{}, err
	}
	if req.Kind == kiln.SourceLocal {
		if err := req.Local.CheckOnHost(); err != nil {
			return store.Source{}, kiln.Errorf(kiln.CodeInvalid, "source %s: %s", req.Name, kiln.ErrorMessage(err))
		}
	}
	if req.ForkPullRequests != "" && !req.ForkPullRequests.Valid() {
		return store.Source{}, errorf(codeInvalid, "fork_pull_requests %q is not approve, run or deny", req.ForkPullRequests)
	}
	if err := kiln.ValidateLabels(req.ForkLabels); err != nil {
		return store.Source{}, errorf(codeInvalid, "fork_labels: %s", kiln.ErrorMessage(err))
	}
	st, err := ingress.Encode(&req.Source)
	if err != nil {
		return store.Source{}, err
	}
	st.ForkPullRequests, st.ForkLabels = req.ForkPullRequests, kiln.NewLabels(req.ForkLabels...)
	st.PublicBadges = req.PublicBadges
	return st, nil
}

// findSource returns a source by name, with a sentence when there is none.
func (s *server) findSource(ctx context.Context, name string) (store.Source, error) {
	if !validRef(name) {
		return store.Source{}, errorf(codeNotFound, "there is no source named %.80q", name)
	}
	st, err := s.DB.Sources().GetByName(ctx, name)
	if kiln.ErrorCode(err) == codeNotFound {
		return st, errorf(codeNotFound, "there is no source named %q", name)
	}
	return st, err
}

func (s *server) getSource(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	st, err := s.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	dto, err := sourceDTO(st)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto)
	return nil
}

func (s *server) deleteSource(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	st, err := s.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	if err := s.DB.Sources().Delete(r.Context(), st.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sourceHook answers the post-receive hook of a local source. The query
// says what the hook runs and exports: kiln (the executable), server
// (KILN_SERVER) and token_file (KILN_TOKEN_FILE, a file only the pushing
// user can read: the hook itself is world-readable).
func (s *server) sourceHook(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "kiln", "server", "token_file"); err != nil {
		return err
	}
	st, err := s.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	fs, err := ingress.Decode(st)
	if err != nil {
		return err
	}
	if fs.Kind != kiln.SourceLocal || fs.Local == nil {
		return errorf(codeInvalid, "source %s is a %s source; hooks are for local sources", fs.Name, fs.Kind)
	}
	cfg, err := HookConfigFor(fs.Name, r.URL.Query().Get("kiln"), r.URL.Query().Get("server"), r.URL.Query().Get("token_file"))
	if err != nil {
		return err
	}
	script, err := forge.HookScript(cfg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, Hook{Source: fs.Name, Path: fs.Local.Path, Script: script})
	return nil
}

// HookConfigFor validates what a local source's hook runs and exports:
// the kiln executable, the server's URL (KILN_SERVER) and the file holding
// the API token (KILN_TOKEN_FILE). Each may be empty.
func HookConfigFor(source, kilnPath, server, tokenFile string) (forge.HookConfig, error) {
	cfg := forge.HookConfig{Source: source, Kiln: kilnPath}
	if server != "" {
		u, err := url.Parse(server)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, errorf(codeInvalid, "server %.80q is not an http:// or https:// URL", server)
		}
		cfg.Env = append(cfg.Env, forge.EnvVar{Name: "KILN_SERVER", Value: server})
	}
	if tokenFile != "" {
		if !filepath.IsAbs(tokenFile) {
			return cfg, errorf(codeInvalid, "token_file %.80q must be an absolute path", tokenFile)
		}
		cfg.Env = append(cfg.Env, forge.EnvVar{Name: "KILN_TOKEN_FILE", Value: tokenFile})
	}
	return cfg, nil
}
