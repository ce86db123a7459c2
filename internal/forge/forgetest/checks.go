package forgetest

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// CheckRun is a check run kiln created, as the fake keeps it: the fields
// of GitHub's check run object kiln sets, every annotation of every
// request in order, and the requests that set it.
type CheckRun struct {
	ID          int64  `json:"id"`
	Repo        string `json:"-"`
	HeadSHA     string `json:"head_sha"`
	Name        string `json:"name"`
	ExternalID  string `json:"external_id"`
	DetailsURL  string `json:"details_url"`
	Status      string `json:"status"`
	Conclusion  string `json:"conclusion"`
	StartedAt   string `json:"started_at"`
	CompletedAt string `json:"completed_at"`
	Output      struct {
		Title   string `json:"title"`
		Summary string `json:"summary"`
		Text    string `json:"text"`
	} `json:"output"`
	Annotations []Annotation `json:"-"`
	// Requests are the statuses set by each request, in order ("queued",
	// "in_progress", "completed"; "" for an update that set none).
	Requests []string `json:"-"`
}

// Annotation is a check run annotation as GitHub takes it.
type Annotation struct {
	Path       string `json:"path"`
	StartLine  int    `json:"start_line"`
	EndLine    int    `json:"end_line"`
	Level      string `json:"annotation_level"`
	Title      string `json:"title"`
	Message    string `json:"message"`
	RawDetails string `json:"raw_details"`
}

// checkWrite is the body of a create or an update.
type checkWrite struct {
	Name        *string `json:"name"`
	HeadSHA     *string `json:"head_sha"`
	DetailsURL  *string `json:"details_url"`
	ExternalID  *string `json:"external_id"`
	Status      *string `json:"status"`
	Conclusion  *string `json:"conclusion"`
	StartedAt   *string `json:"started_at"`
	CompletedAt *string `json:"completed_at"`
	Output      *struct {
		Title       *string      `json:"title"`
		Summary     *string      `json:"summary"`
		Text        *string      `json:"text"`
		Annotations []Annotation `json:"annotations"`
	} `json:"output"`
}

// CheckRuns returns the check runs created so far, in creation order.
func (g *GitHub) CheckRuns() []CheckRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]CheckRun, len(g.checkRuns))
	for i, c := range g.checkRuns {
		out[i] = *c
		out[i].Annotations = slices.Clone(c.Annotations)
		out[i].Requests = slices.Clone(c.Requests)
	}
	return out
}

// FailChecks makes every check run create and update answer status with
// message (422 "Validation Failed", 403 …) until called with status 0.
func (g *GitHub) FailChecks(status int, message string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checksFail, g.checksFailMsg = status, message
}

var (
	hexSHA       = regexp.MustCompile(`^[0-9a-f]{40}$`)
	checkStatus  = []string{"queued", "in_progress", "completed", "waiting", "requested", "pending"}
	checkResults = []string{"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}
	annLevels    = []string{"notice", "warning", "failure"}
)

// checkRuns serves POST /repos/{o}/{r}/check-runs, PATCH …/check-runs/{id}
// and GET …/commits/{sha}/check-runs; called with mu.
func (g *GitHub) checkRunsAPI(w http.ResponseWriter, r *http.Request, repo string, rest []string) {
	if r.Method == http.MethodGet {
		name := r.URL.Query().Get("check_name")
		list := []*CheckRun{}
		for _, c := range g.checkRuns {
			if c.Repo == repo && c.HeadSHA == rest[1] && (name == "" || c.Name == name) {
				list = append(list, c)
			}
		}
		slices.Reverse(list) // newest first, as GitHub lists them
		writeJSON(w, http.StatusOK, map[string]any{"total_count": len(list), "check_runs": list})
		return
	}
	if g.checksFail != 0 {
		writeJSON(w, g.checksFail, map[string]string{"message": g.checksFailMsg, "documentation_url": "https://docs.github.com/rest/checks/runs"})
		return
	}
	var in checkWrite
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	var c *CheckRun
	create := r.Method == http.MethodPost
	if create {
		if in.Name == nil || *in.Name == "" || in.HeadSHA == nil || !hexSHA.MatchString(*in.HeadSHA) {
			invalid(w, "name and a 40-character head_sha are required")
			return
		}
		c = &CheckRun{ID: int64(len(g.checkRuns) + 1), Repo: repo, HeadSHA: *in.HeadSHA, Status: "queued"}
	} else {
		id, _ := strconv.ParseInt(rest[1], 10, 64)
		if id < 1 || int(id) > len(g.checkRuns) || g.checkRuns[id-1].Repo != repo {
			notFound(w)
			return
		}
		cp := *g.checkRuns[id-1]
		c = &cp
	}
	if why := applyCheck(c, &in); why != "" {
		invalid(w, why)
		return
	}
	if create {
		g.checkRuns = append(g.checkRuns, c)
		writeJSON(w, http.StatusCreated, c)
		return
	}
	*g.checkRuns[c.ID-1] = *c
	writeJSON(w, http.StatusOK, c)
}

// applyCheck validates a write as GitHub does and applies it to c.
func applyCheck(c *CheckRun, in *checkWrite) string {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&c.Name, in.Name)
	set(&c.DetailsURL, in.DetailsURL)
	set(&c.ExternalID, in.ExternalID)
	for _, ts := range []*string{in.StartedAt, in.CompletedAt} {
		if ts != nil {
			if _, err := time.Parse(time.RFC3339, *ts); err != nil {
				return "timestamps are ISO 8601: YYYY-MM-DDTHH:MM:SSZ"
			}
		}
	}
	set(&c.StartedAt, in.StartedAt)
	set(&c.CompletedAt, in.CompletedAt)
	status := ""
	if in.Status != nil {
		if !slices.Contains(checkStatus, *in.Status) {
			return "status is not one of " + join(checkStatus)
		}
		status = *in.Status
	}
	if in.Conclusion != nil {
		if !slices.Contains(checkResults, *in.Conclusion) {
			return "conclusion is not one of " + join(checkResults)
		}
		c.Conclusion, status = *in.Conclusion, "completed"
	}
	if (status == "completed" || in.CompletedAt != nil) && c.Conclusion == "" {
		return "conclusion is required with a status of completed or completed_at"
	}
	if status != "" {
		c.Status = status
	}
	c.Requests = append(c.Requests, status)
	if o := in.Output; o != nil {
		if o.Title == nil || o.Summary == nil || *o.Title == "" || *o.Summary == "" {
			return "output needs a title and a summary"
		}
		if utf8.RuneCountInString(*o.Summary) > 65535 || (o.Text != nil && utf8.RuneCountInString(*o.Text) > 65535) {
			return "output.summary and output.text are at most 65535 characters"
		}
		if len(o.Annotations) > 50 {
			return "only 50 annotations are allowed per request"
		}
		for _, a := range o.Annotations {
			if a.Path == "" || a.StartLine < 1 || a.EndLine < a.StartLine || a.Message == "" || !slices.Contains(annLevels, a.Level) {
				return "an annotation needs a path, start_line ≤ end_line, annotation_level notice, warning or failure, and a message"
			}
		}
		c.Output.Title, c.Output.Summary = *o.Title, *o.Summary
		set(&c.Output.Text, o.Text)
		c.Annotations = append(c.Annotations, o.Annotations...)
	}
	return ""
}

func invalid(w http.ResponseWriter, why string) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
		"errors": []map[string]string{{"resource": "CheckRun", "code": "invalid", "message": why}}})
}

func join(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
