package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Run list limits.
const (
	defaultRunLimit = 50
	maxListLimit    = 1000
)

func (s *server) listRuns(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "status", "workflow", "repository", "source", "branch", "event", "limit", "before"); err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.RunFilter{Workflow: q.Get("workflow"), Repository: q.Get("repository")}
	if err := s.moreRunFilters(r, &f); err != nil {
		return err
	}
	if st := q.Get("status"); st != "" {
		if !slices.Contains(kiln.RunStatuses, kiln.RunStatus(st)) {
			return errorf(codeInvalid, "status %q is not a run status (pending, running, cancelling, success, failed, cancelled)", st)
		}
		f.Status = kiln.RunStatus(st)
	}
	limit, err := queryInt(r, "limit", defaultRunLimit, 1, maxListLimit)
	if err != nil {
		return err
	}
	if f.Before, err = queryInt(r, "before", 0, 1, 1<<62); err != nil {
		return err
	}
	f.Limit = int(limit)
	runs, err := s.DB.Runs().List(r.Context(), f)
	if err != nil {
		return err
	}
	names, err := s.sourceNames(r.Context())
	if err != nil {
		return err
	}
	out := RunList{Runs: make([]Run, len(runs))}
	for i, run := range runs {
		out.Runs[i] = runDTO(run, names[run.Source], false)
	}
	if len(runs) == f.Limit && runs[len(runs)-1].Number > 1 {
		out.NextBefore = runs[len(runs)-1].Number
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) getRun(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	run, err := s.findRun(r.Context(), r.PathValue("run"))
	if err != nil {
		return err
	}
	dto, err := s.fullRun(r.Context(), run)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto)
	return nil
}

func (s *server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req CancelRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if len(req.Reason) > 500 {
		return errorf(codeInvalid, "reason is longer than 500 bytes")
	}
	run, err := s.findRun(r.Context(), r.PathValue("run"))
	if err != nil {
		return err
	}
	if run.Status.Terminal() {
		return errorf(kiln.CodeConflict, "run #%d already finished (%s); there is nothing to cancel", run.Number, run.Status)
	}
	forced := run.Status == kiln.RunCancelling
	reason := req.Reason
	if reason == "" {
		reason = "cancelled by " + actor(r)
		if run.Approval.Waiting() {
			reason = "rejected by " + actor(r) // cancel is how a held run is rejected
		}
	}
	after, err := s.Engine.Cancel(r.Context(), run.ID, reason)
	if err != nil {
		return err
	}
	dto, err := s.fullRun(r.Context(), after)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, CancelResult{Forced: forced, Run: dto})
	return nil
}

func (s *server) rerunRun(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req RerunRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	run, err := s.findRun(r.Context(), r.PathValue("run"))
	if err != nil {
		return err
	}
	if !run.Status.Terminal() {
		return errorf(kiln.CodeConflict, "run #%d is still %s; cancel it or wait for it to finish before rerunning", run.Number, run.Status)
	}
	created, err := s.Engine.Rerun(r.Context(), run.ID, req.FailedOnly)
	if err != nil {
		return err
	}
	fresh, err := s.DB.Runs().Get(r.Context(), created.ID)
	if err != nil {
		return err
	}
	dto, err := s.fullRun(r.Context(), fresh)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/runs/"+fresh.ID)
	writeJSON(w, http.StatusCreated, dto)
	return nil
}

// findRun resolves a run reference: its number ("12" or "#12") or its id.
func (s *server) findRun(ctx context.Context, ref string) (store.Run, error) {
	ref = strings.TrimPrefix(ref, "#")
	if ref == "" {
		return store.Run{}, errorf(codeInvalid, "name a run by its number or id")
	}
	if n, err := strconv.ParseInt(ref, 10, 64); err == nil {
		run, err := s.DB.Runs().GetByNumber(ctx, n)
		if kiln.ErrorCode(err) == codeNotFound {
			return run, errorf(codeNotFound, "there is no run #%d", n)
		}
		return run, err
	}
	if !validRef(ref) {
		return store.Run{}, errorf(codeNotFound, "there is no run %.64q", ref)
	}
	run, err := s.DB.Runs().Get(ctx, ref)
	if kiln.ErrorCode(err) == codeNotFound {
		return run, errorf(codeNotFound, "there is no run %q", ref)
	}
	return run, err
}

func (s *server) fullRun(ctx context.Context, run store.Run) (Run, error) {
	names, err := s.sourceNames(ctx)
	if err != nil {
		return Run{}, err
	}
	return runDTO(run, names[run.Source], true), nil
}

// sourceNames maps source ids (what runs and deliveries keep) to names.
func (s *server) sourceNames(ctx context.Context) (map[string]string, error) {
	srcs, err := s.DB.Sources().List(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(srcs))
	for _, src := range srcs {
		m[src.ID] = src.Name
	}
	return m, nil
}

// moreRunFilters reads the filters the dashboard added (B304): source
// (by name), branch (a name, or a full ref) and event.
func (s *server) moreRunFilters(r *http.Request, f *store.RunFilter) error {
	q := r.URL.Query()
	if name := q.Get("source"); name != "" {
		src, err := s.DB.Sources().GetByName(r.Context(), name)
		if kiln.ErrorCode(err) == codeNotFound {
			f.Source = "(none)" // an unknown source has no runs
		} else if err != nil {
			return err
		} else {
			f.Source = src.ID
		}
	}
	if b := q.Get("branch"); b != "" {
		f.Ref = b
		if !strings.HasPrefix(b, "refs/") {
			f.Ref = "refs/heads/" + b
		}
	}
	if ev := q.Get("event"); ev != "" {
		if !slices.Contains(kiln.EventNames, kiln.EventName(ev)) {
			return errorf(codeInvalid, "event %q is not an event kiln knows (push, pull_request, tag, schedule, dispatch)", ev)
		}
		f.Event = kiln.EventName(ev)
	}
	return nil
}
