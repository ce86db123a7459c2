package api

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Scalers is what the API shows of the scaler manager (docs/scalers.md).
type Scalers interface {
	Statuses() []ScalerView
}

// ScalerView is one scaler as its manager sees it.
type ScalerView struct {
	Name                string
	Type                string
	Labels, Mandatory   []string
	Active, Spawning    int
	MaxAgents           int
	WarmReady           int
	WarmTarget          int
	ConsecutiveFailures int
	LastError           string
	LastErrorAt         time.Time
	RetryAt             time.Time
	Retiring            bool
}

// Scaler is a configured scaler.
type Scaler struct {
	Name                string      `json:"name"`
	Type                string      `json:"type"`
	Labels              kiln.Labels `json:"labels"`
	Mandatory           kiln.Labels `json:"mandatory,omitempty"`
	ActiveAgents        int         `json:"active_agents"`
	SpawnsInFlight      int         `json:"spawns_in_flight"`
	MaxAgents           int         `json:"max_agents"`
	WarmReady           int         `json:"warm_pool_ready"`
	WarmTarget          int         `json:"warm_pool_target"`
	ConsecutiveFailures int         `json:"consecutive_failures"`
	LastError           string      `json:"last_error,omitempty"`
	LastErrorAt         *time.Time  `json:"last_error_at,omitempty"`
	RetryAt             *time.Time  `json:"retry_at,omitempty"`
	Retiring            bool        `json:"retiring,omitempty"`
}

// ScalerList is every configured scaler, in configuration order.
type ScalerList struct {
	Scalers []Scaler `json:"scalers"`
}

// TimelineEvent is one entry of a run's timeline.
type TimelineEvent struct {
	At     time.Time `json:"at"`
	Type   string    `json:"type"`
	JobID  string    `json:"job_id,omitempty"`
	Job    string    `json:"job,omitempty"`
	Detail string    `json:"detail"`
}

// Timeline is a run's timeline, oldest first.
type Timeline struct {
	RunID  string          `json:"run_id"`
	Events []TimelineEvent `json:"events"`
}

func (s *server) listScalers(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	out := ScalerList{Scalers: []Scaler{}}
	if s.Scalers != nil {
		for _, v := range s.Scalers.Statuses() {
			out.Scalers = append(out.Scalers, Scaler{Name: v.Name, Type: v.Type, Labels: orEmptyLabels(kiln.NewLabels(v.Labels...)),
				Mandatory: kiln.NewLabels(v.Mandatory...), ActiveAgents: v.Active, SpawnsInFlight: v.Spawning, MaxAgents: v.MaxAgents,
				WarmReady: v.WarmReady, WarmTarget: v.WarmTarget, ConsecutiveFailures: v.ConsecutiveFailures, LastError: v.LastError,
				LastErrorAt: tp(v.LastErrorAt), RetryAt: tp(v.RetryAt), Retiring: v.Retiring})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

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
// job's name or id.
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
	out := Timeline{RunID: run.ID, Events: make([]TimelineEvent, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, TimelineEvent{At: e.At, Type: e.Type, JobID: e.JobID, Job: names[e.JobID], Detail: e.Detail})
	}
	return out, nil
}

// Scalers lists the configured scalers.
func (c *Client) Scalers(ctx context.Context) ([]Scaler, error) {
	var out ScalerList
	_, err := c.do(ctx, "GET", "/api/v1/scalers", nil, nil, &out)
	return out.Scalers, err
}

// Timeline reads a run's timeline.
func (c *Client) Timeline(ctx context.Context, run string) (Timeline, error) {
	var out Timeline
	_, err := c.do(ctx, "GET", "/api/v1/runs/"+url.PathEscape(run)+"/timeline", nil, nil, &out)
	return out, err
}
