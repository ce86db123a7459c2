package api

import (
	"net/http"

	"github.com/kilnci/kiln/internal/store"
)

// approveRun lets a run held for approval (a fork pull request's) go,
// recording the admin token's name and the time: its jobs are released
// as if the run had just been created. Cancel is how one is rejected.
func (s *server) approveRun(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	if err := s.decodeBody(w, r, &struct{}{}, true); err != nil {
		return err
	}
	run, err := s.findRun(r.Context(), r.PathValue("run"))
	if err != nil {
		return err
	}
	after, err := s.Engine.Approve(r.Context(), run.ID, approver(r))
	if err != nil {
		return err
	}
	dto, err := s.fullRun(r.Context(), after)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto)
	return nil
}

// approver is the name of the admin token a request came with.
func approver(r *http.Request) string {
	if tk, ok := r.Context().Value(ctxKey{}).(store.AdminToken); ok && tk.Name != "" {
		return tk.Name
	}
	return "api"
}
