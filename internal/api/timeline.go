package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// TimelineEvent is one entry of a run's timeline.
type TimelineEvent struct {
	At     time.Time `json:"at"`
	Type   string    `json:"type"`
	JobID  string    `json:"job_id,omitempty"`
	Job    string    `json:"job,omitempty"`
	Detail string    `json:"detail"`
}

// Timeline is a run's timeline, oldest first: the delivery that started
// the run and the trigger decision (read from the run), then what the
// store recorded as it happened (run_events): releases, dispatches,
// requeues and retries, reruns, approval, and the scaler's events.
type Timeline struct {
	RunID  string          `json:"run_id"`
	Events []TimelineEvent `json:"events"`
}

// The timeline entries made from the run itself rather than run_events.
const (
	EventDelivery = "delivery"
	EventTrigger  = "trigger"
)

func (s *server) runTimeline(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "job"); err != nil {
		return err
	}
	run, err := s.findRun(r.Context(), r.PathValue("run"))
	if err != nil {
		return err
	}
	tl, err := s.timeline(r.Context(), run, r.URL.Query().Get("job"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, tl)
	return nil
}

// timeline reads a run's events, naming their jobs; job ("" for all) is a
// job's name or id, and narrows the timeline to that job's events.
func (s *server) timeline(ctx context.Context, run store.Run, job string) (Timeline, error) {
	names := map[string]string{}
	jobID := ""
	for _, j := range run.Jobs {
		names[j.ID] = j.Name
		if job != "" && (j.ID == job || j.Name == job) {
			jobID = j.ID
		}
	}
	if job != "" && jobID == "" {
		return Timeline{}, errorf(codeNotFound, "run %d has no job %.80q", run.Number, job)
	}
	evs, err := s.DB.Runs().Timeline(ctx, run.ID, jobID)
	if err != nil {
		return Timeline{}, err
	}
	out := Timeline{RunID: run.ID, Events: make([]TimelineEvent, 0, len(evs)+2)}
	if jobID == "" {
		origin, err := s.origin(ctx, run)
		if err != nil {
			return Timeline{}, err
		}
		out.Events = append(out.Events, origin...)
	}
	for _, e := range evs {
		out.Events = append(out.Events, TimelineEvent{At: e.At, Type: e.Type, JobID: e.JobID, Job: names[e.JobID], Detail: e.Detail})
	}
	return out, nil
}

// origin is where a run's timeline starts: the delivery that started it,
// if one did (its event-log row, read without its body), and the trigger
// decision with each of its checks, one a line.
func (s *server) origin(ctx context.Context, run store.Run) ([]TimelineEvent, error) {
	var out []TimelineEvent
	if run.DeliveryID != 0 {
		ds, err := s.DB.Ingress().List(ctx, store.DeliveryFilter{Before: run.DeliveryID + 1, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(ds) == 1 && ds[0].ID == run.DeliveryID {
			d := ds[0]
			detail := fmt.Sprintf("%s event %d received", cmp.Or(d.Event, "an"), d.ID)
			if d.DeliveryID != "" {
				detail += " (delivery " + d.DeliveryID + ")"
			}
			out = append(out, TimelineEvent{At: d.ReceivedAt.UTC(), Type: EventDelivery, Detail: detail})
		}
	}
	if detail := decisionText(run.Trace); detail != "" {
		out = append(out, TimelineEvent{At: run.CreatedAt.UTC(), Type: EventTrigger, Detail: detail})
	}
	return out, nil
}

// decisionText is a stored trigger decision in words: its summary, then a
// line per check. A run started without one (a rerun keeps its run's) has
// none: "".
func decisionText(trace json.RawMessage) string {
	var d struct {
		Trigger kiln.EventName `json:"trigger"`
		Summary string         `json:"summary"`
		Checks  []struct {
			Check   string `json:"check"`
			Pattern string `json:"pattern"`
			Value   string `json:"value"`
			Passed  bool   `json:"passed"`
			Reason  string `json:"reason"`
		} `json:"checks"`
	}
	if len(trace) == 0 || json.Unmarshal(trace, &d) != nil || (d.Summary == "" && len(d.Checks) == 0) {
		return ""
	}
	var b strings.Builder
	b.WriteString(cmp.Or(d.Summary, "matched "+string(d.Trigger)))
	for _, c := range d.Checks {
		mark := "passed"
		if !c.Passed {
			mark = "failed"
		}
		why := c.Reason
		if why == "" {
			why = fmt.Sprintf("%q against %q", c.Value, c.Pattern)
		}
		fmt.Fprintf(&b, "\n%s %s: %s", mark, c.Check, why)
	}
	return b.String()
}

// Timeline reads a run's timeline.
func (c *Client) Timeline(ctx context.Context, run string) (Timeline, error) {
	var out Timeline
	_, err := c.do(ctx, "GET", "/api/v1/runs/"+url.PathEscape(run)+"/timeline", nil, nil, &out)
	return out, err
}
