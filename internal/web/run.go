package web

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
)

type runData struct {
	Run       api.Run
	Graph     template.HTML
	Jobs      []jobRow
	Timeline  []api.TimelineEvent
	Artifacts []api.Artifact
	Inputs    string
	Live      bool
	CanRerun  bool
	CanFailed bool
}

// jobRow is a job as the run page's table shows it.
type jobRow struct {
	api.Job
	RunNumber int64
	Needs     string
	Matrix    string
	Why       string // the pending reason or the failure
}

// runPage shows a run (B305): the job graph, each job's status, agent,
// duration, matrix values and pending or failure reason, the timeline,
// artifacts and, for admins, cancel, rerun and approve. While the run is
// not finished the page follows it live (liverun.go), or reloads itself
// every 5 seconds without JavaScript.
func (s *site) runPage(w http.ResponseWriter, r *http.Request) error {
	ref := url.PathEscape(r.PathValue("run"))
	tk := sessionOf(r).Token
	var run api.Run
	if err := s.call(r.Context(), tk, "GET", "/api/v1/runs/"+ref, nil, nil, &run); err != nil {
		return err
	}
	d := runData{Run: run, Graph: jobGraph(run), Live: !run.Status.Terminal(), CanRerun: run.Status.Terminal()}
	var tl api.Timeline
	if err := s.call(r.Context(), tk, "GET", "/api/v1/runs/"+ref+"/timeline", nil, nil, &tl); err != nil && kiln.ErrorCode(err) != kiln.CodeNotFound {
		return err
	}
	d.Timeline = tl.Events
	var arts api.ArtifactList
	if err := s.call(r.Context(), tk, "GET", "/api/v1/runs/"+ref+"/artifacts", nil, nil, &arts); err != nil && kiln.ErrorCode(err) != kiln.CodeNotFound {
		return err
	}
	d.Artifacts = arts.Artifacts
	if len(run.Inputs) > 0 {
		d.Inputs = string(run.Inputs)
	}
	d.Jobs = jobRows(run)
	for _, j := range run.Jobs {
		if j.Result == kiln.ResultFailure || j.Result == kiln.ResultCancelled {
			d.CanFailed = d.CanRerun
		}
	}
	refresh := 0
	if d.Live {
		refresh = 5
	}
	title := fmt.Sprintf("Run #%d · %s", run.Number, run.Workflow)
	s.renderFrame(w, r, http.StatusOK, "run", frame{Title: title, Data: d, Refresh: refresh})
	return nil
}

// jobRows are a run's jobs as its page's table shows them.
func jobRows(run api.Run) []jobRow {
	rows := make([]jobRow, 0, len(run.Jobs))
	for _, j := range run.Jobs {
		row := jobRow{Job: j, RunNumber: run.Number, Matrix: matrixText(j.Matrix), Why: j.PendingReason}
		var needs []string
		for _, n := range j.Needs {
			needs = append(needs, n.Job)
		}
		row.Needs = strings.Join(needs, ", ")
		if j.Error != "" {
			row.Why = j.Error
		} else if row.Why == "" && j.LastProvisioningError != "" {
			row.Why = "provisioning failed: " + j.LastProvisioningError
		}
		rows = append(rows, row)
	}
	return rows
}

// matrixText is a job's matrix values as "os=linux, go=1.23".
func matrixText(raw json.RawMessage) string {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v, _ := json.Marshal(m[k])
		parts[i] = k + "=" + strings.Trim(string(v), `"`)
	}
	return strings.Join(parts, ", ")
}

// cancelRun cancels a run (a second cancel forces it), as the API does.
func (s *site) cancelRun(w http.ResponseWriter, r *http.Request) error {
	ref := url.PathEscape(r.PathValue("run"))
	var out api.CancelResult
	reason := "cancelled in the dashboard by " + sessionOf(r).Token.Name
	if err := s.call(r.Context(), sessionOf(r).Token, "POST", "/api/v1/runs/"+ref+"/cancel", nil, api.CancelRequest{Reason: reason}, &out); err != nil {
		return err
	}
	http.Redirect(w, r, fmt.Sprintf("/runs/%d", out.Run.Number), http.StatusSeeOther)
	return nil
}

// rerunRun starts a new run of a finished one: all jobs, or (failed=1)
// only the failed ones and their dependents.
func (s *site) rerunRun(w http.ResponseWriter, r *http.Request) error {
	ref := url.PathEscape(r.PathValue("run"))
	var out api.Run
	req := api.RerunRequest{FailedOnly: r.PostForm.Get("failed") == "1"}
	if err := s.call(r.Context(), sessionOf(r).Token, "POST", "/api/v1/runs/"+ref+"/rerun", nil, req, &out); err != nil {
		return err
	}
	http.Redirect(w, r, fmt.Sprintf("/runs/%d", out.Number), http.StatusSeeOther)
	return nil
}

// approveRun lets a fork's run held for approval go.
func (s *site) approveRun(w http.ResponseWriter, r *http.Request) error {
	ref := url.PathEscape(r.PathValue("run"))
	var out api.Run
	if err := s.call(r.Context(), sessionOf(r).Token, "POST", "/api/v1/runs/"+ref+"/approve", nil, nil, &out); err != nil {
		return err
	}
	http.Redirect(w, r, fmt.Sprintf("/runs/%d", out.Number), http.StatusSeeOther)
	return nil
}

// artifact streams an artifact's body from the API.
func (s *site) artifact(w http.ResponseWriter, r *http.Request) error {
	path := "/api/v1/runs/" + url.PathEscape(r.PathValue("run")) + "/artifacts/" + url.PathEscape(r.PathValue("name"))
	req, err := http.NewRequestWithContext(r.Context(), "GET", "http://kiln.invalid"+path, nil)
	if err != nil {
		return err
	}
	resp, err := pipeTransport{s.api, sessionOf(r).Token}.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Disposition"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return nil
}
