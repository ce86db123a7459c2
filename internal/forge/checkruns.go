package forge

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kilnci/kiln"
)

// GitHub check runs (a GitHub App source with "checks": true): instead of
// a commit status, each update of a run sets one check run, created when
// the run is created and updated until it completes, with the failing
// steps and lint errors as annotations. Only GitHub Apps may write check
// runs, with the installation's checks: write permission; the installation
// token kiln uses for the API carries it, the read-only clone tokens never
// do.

// CheckStatus is a check run's status, as GitHub spells it.
type CheckStatus string

// The statuses kiln sets.
const (
	CheckQueued     CheckStatus = "queued"
	CheckInProgress CheckStatus = "in_progress"
	CheckCompleted  CheckStatus = "completed"
)

// CheckConclusion is how a completed check run ended, as GitHub spells it.
type CheckConclusion string

// The conclusions kiln sets.
const (
	ConclusionSuccess   CheckConclusion = "success"
	ConclusionFailure   CheckConclusion = "failure"
	ConclusionCancelled CheckConclusion = "cancelled"
	ConclusionTimedOut  CheckConclusion = "timed_out"
	ConclusionSkipped   CheckConclusion = "skipped"
)

// GitHub's limits on a check run.
const (
	// MaxAnnotationsPerRequest is how many annotations GitHub takes in one
	// create or update; further ones go in more updates, which append.
	MaxAnnotationsPerRequest = 50
	// MaxAnnotations bounds what kiln sends for one check run (six
	// requests): a workflow failing everywhere stays readable.
	MaxAnnotations = 300
	maxCheckText   = 65535 // output.summary and output.text, in characters
	maxCheckTitle  = 255
	maxAnnotation  = 64 << 10 // an annotation's message, in bytes
	// maxCheckIDs bounds the check run ids a source remembers; past it the
	// memory is dropped and ids are looked up again (one GET each).
	maxCheckIDs = 10000
)

// CheckRun is what a Status carries for a source that posts check runs:
// the Status's Context is the check run's name, its TargetURL the details
// URL, and a StatusPoster that does not post check runs ignores it.
type CheckRun struct {
	// ExternalID is kiln's id for what the check run reports (a run's id,
	// or "delivery-N" for a workflow file that failed lint): an update
	// after a restart finds the check run by it.
	ExternalID  string
	Status      CheckStatus
	Conclusion  CheckConclusion // with CheckCompleted
	StartedAt   time.Time
	CompletedAt time.Time
	Title       string // the output's title; empty: no output
	Summary     string // Markdown
	Text        string // Markdown
	Annotations []Annotation
}

// Annotation is one GitHub check run annotation, in GitHub's wire format:
// a file of the repository and a line range, a level (notice, warning,
// failure) and a message.
type Annotation struct {
	Path       string `json:"path"`
	StartLine  int    `json:"start_line"`
	EndLine    int    `json:"end_line"`
	Level      string `json:"annotation_level"`
	Title      string `json:"title,omitempty"`
	Message    string `json:"message"`
	RawDetails string `json:"raw_details,omitempty"`
}

// Annotation levels.
const (
	AnnotationFailure = "failure"
	AnnotationWarning = "warning"
	AnnotationNotice  = "notice"
)

// ChecksRefused is what PostStatus answers when GitHub refused a check run
// for good — 403, the App lacks checks: write; 422, GitHub found it
// invalid — and kiln posted the same update as a commit status instead.
// The StatusReporter counts the update as posted and tells its Fallback
// hook the Reason.
type ChecksRefused struct{ Reason string }

func (e *ChecksRefused) Error() string {
	return "posted a commit status instead of a check run: " + e.Reason
}

// checkRunBody is the JSON of POST /repos/{o}/{r}/check-runs and PATCH
// /repos/{o}/{r}/check-runs/{id}.
type checkRunBody struct {
	Name        string       `json:"name,omitempty"`
	HeadSHA     string       `json:"head_sha,omitempty"`
	DetailsURL  string       `json:"details_url,omitempty"`
	ExternalID  string       `json:"external_id,omitempty"`
	Status      CheckStatus  `json:"status,omitempty"`
	StartedAt   string       `json:"started_at,omitempty"`
	Conclusion  string       `json:"conclusion,omitempty"`
	CompletedAt string       `json:"completed_at,omitempty"`
	Output      *checkOutput `json:"output,omitempty"`
}

type checkOutput struct {
	Title       string       `json:"title"`
	Summary     string       `json:"summary"`
	Text        string       `json:"text,omitempty"`
	Annotations []Annotation `json:"annotations,omitempty"`
}

// checkIDs remembers the GitHub id of each check run kiln created, so an
// update is a PATCH without a lookup.
type checkIDs struct {
	mu  sync.Mutex
	ids map[checkKey]int64
}

type checkKey struct{ repo, sha, name, external string }

func (c *checkIDs) get(k checkKey) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ids[k]
	return id, ok
}

func (c *checkIDs) put(k checkKey, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil || len(c.ids) >= maxCheckIDs {
		c.ids = map[checkKey]int64{}
	}
	c.ids[k] = id
}

// postCheck creates or updates the check run st describes: a PATCH when
// kiln knows the check run (remembered, or found on the commit by its
// external id), else a POST; annotations past the first 50 follow in
// PATCHes of 50.
func (g *gitHub) postCheck(ctx context.Context, repo, sha string, st Status) error {
	rp, err := repoPath(repo)
	if err != nil {
		return err
	}
	if err := checkSHA(sha); err != nil {
		return err
	}
	if st, err = st.normalize(); err != nil {
		return err
	}
	c := st.Check
	body, rest := checkBody(st)
	key := checkKey{repo, sha, st.Context, c.ExternalID}
	id, known := g.checks.get(key)
	if !known {
		if id, err = g.findCheck(ctx, rp, sha, st.Context, c.ExternalID); err != nil {
			return err
		}
	}
	if id == 0 {
		body.HeadSHA = sha
		var out struct {
			ID int64 `json:"id"`
		}
		if _, err := g.api.do(ctx, request{method: http.MethodPost, path: rp + "/check-runs", in: body}, &out); err != nil {
			return err
		}
		if out.ID <= 0 {
			return kiln.Errorf(kiln.CodeUnavailable, "GitHub answered the new check run %s without its id", st.Context)
		}
		id = out.ID
	} else {
		body.Name = "" // the name stays; a PATCH sends only what changes
		if _, err := g.api.do(ctx, request{method: http.MethodPatch, path: checkPath(rp, id), in: body}, nil); err != nil {
			return err
		}
	}
	g.checks.put(key, id)
	for len(rest) > 0 {
		n := min(len(rest), MaxAnnotationsPerRequest)
		more := checkRunBody{Output: &checkOutput{Title: body.Output.Title, Summary: body.Output.Summary, Annotations: rest[:n]}}
		if _, err := g.api.do(ctx, request{method: http.MethodPatch, path: checkPath(rp, id), in: more}, nil); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

func checkPath(rp string, id int64) string { return rp + "/check-runs/" + strconv.FormatInt(id, 10) }

// findCheck looks for kiln's check run named name on sha whose external
// id is external (0: none): what a restarted server updates.
func (g *gitHub) findCheck(ctx context.Context, rp, sha, name, external string) (int64, error) {
	var out struct {
		CheckRuns []struct {
			ID         int64  `json:"id"`
			ExternalID string `json:"external_id"`
		} `json:"check_runs"`
	}
	q := url.Values{"check_name": {name}, "filter": {"all"}, "per_page": {itoa(gitHubPerPage)}}
	_, err := g.api.do(ctx, request{method: http.MethodGet, path: rp + "/commits/" + sha + "/check-runs", query: q}, &out)
	if kiln.ErrorCode(err) == kiln.CodeNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, cr := range out.CheckRuns {
		if cr.ExternalID == external && cr.ID > 0 {
			return cr.ID, nil
		}
	}
	return 0, nil
}

// checkBody is the request for st's check run, with its first 50
// annotations, and the annotations left for further updates.
func checkBody(st Status) (checkRunBody, []Annotation) {
	c := st.Check
	b := checkRunBody{Name: st.Context, DetailsURL: st.TargetURL, ExternalID: c.ExternalID, Status: c.Status}
	if !c.StartedAt.IsZero() {
		b.StartedAt = c.StartedAt.UTC().Format(time.RFC3339)
	}
	if c.Status == CheckCompleted {
		b.Conclusion = string(c.Conclusion)
		if !c.CompletedAt.IsZero() {
			b.CompletedAt = c.CompletedAt.UTC().Format(time.RFC3339)
		}
	}
	title := c.Title
	if title == "" {
		title = st.Description
	}
	if title == "" {
		return b, nil
	}
	b.Output = &checkOutput{Title: clipRunes(title, maxCheckTitle), Summary: clipRunes(c.Summary, maxCheckText), Text: clipRunes(c.Text, maxCheckText)}
	if b.Output.Summary == "" {
		b.Output.Summary = b.Output.Title
	}
	anns := make([]Annotation, 0, min(len(c.Annotations), MaxAnnotations))
	for _, a := range c.Annotations[:min(len(c.Annotations), MaxAnnotations)] {
		if a.StartLine < 1 {
			a.StartLine = 1
		}
		if a.EndLine < a.StartLine {
			a.EndLine = a.StartLine
		}
		if a.Level == "" {
			a.Level = AnnotationFailure
		}
		a.Message = clipBytes(a.Message, maxAnnotation)
		a.RawDetails = clipBytes(a.RawDetails, maxAnnotation)
		a.Title = clipRunes(a.Title, maxCheckTitle)
		anns = append(anns, a)
	}
	n := min(len(anns), MaxAnnotationsPerRequest)
	b.Output.Annotations = anns[:n]
	return b, anns[n:]
}

// checksRefused reports whether GitHub refused a check run for good: no
// permission (403, not a rate limit) or an invalid request (422).
func checksRefused(err error) bool {
	if err == nil || Retryable(err) {
		return false
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Status == http.StatusForbidden || ae.Status == http.StatusUnprocessableEntity
}

// clipRunes cuts s to at most n characters, with an ellipsis.
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// clipBytes cuts s to at most n bytes on a rune boundary, keeping its end:
// the end of a log is where the failure is.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n+len("…"):]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return "…" + s
}
