package api

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/kilnci/kiln"
)

// Agent is an agent kiln knows: connected ones as the fleet sees them,
// others from the agents table.
type Agent struct {
	ID            string      `json:"id"`
	State         string      `json:"state"` // connected, draining, unhealthy, disconnected
	Labels        kiln.Labels `json:"labels"`
	Mandatory     kiln.Labels `json:"mandatory,omitempty"`
	MaxJobs       int         `json:"max_jobs,omitempty"`
	ActiveJobs    int         `json:"active_jobs"`
	Connected     bool        `json:"connected"`
	Draining      bool        `json:"draining,omitempty"`
	Healthy       bool        `json:"healthy"`
	ConnectedAt   *time.Time  `json:"connected_at,omitempty"`
	LastHeartbeat *time.Time  `json:"last_heartbeat,omitempty"`
	LastSeen      *time.Time  `json:"last_seen,omitempty"`
	Version       string      `json:"version,omitempty"`
	Hostname      string      `json:"hostname,omitempty"`
	TokenID       string      `json:"token_id,omitempty"`
	// Coordinator is the advertise URL of the server the agent is
	// connected to (any server sharing the database).
	Coordinator string `json:"coordinator,omitempty"`
}

// AgentList is every agent kiln knows, by id.
type AgentList struct {
	Agents []Agent `json:"agents"`
}

// Agent states.
const (
	AgentConnected    = "connected"
	AgentDraining     = "draining"
	AgentUnhealthy    = "unhealthy"
	AgentDisconnected = "disconnected"
)

func agentDTO(v AgentView) Agent {
	a := Agent{
		ID: v.ID, Labels: orEmptyLabels(kiln.NewLabels(v.Labels...)), Mandatory: kiln.NewLabels(v.Mandatory...),
		MaxJobs: v.MaxJobs, ActiveJobs: v.ActiveJobs, Connected: true, Draining: v.Draining, Healthy: v.Healthy,
		ConnectedAt: tp(v.ConnectedAt), LastHeartbeat: tp(v.LastHeartbeat), LastSeen: tp(v.LastHeartbeat),
		Version: v.Version, Hostname: v.Hostname, TokenID: v.TokenID, State: AgentConnected,
	}
	if len(a.Mandatory) == 0 {
		a.Mandatory = nil
	}
	switch {
	case v.Draining:
		a.State = AgentDraining
	case !v.Healthy:
		a.State = AgentUnhealthy
	}
	return a
}

// agents merges the fleet's connected agents with the ones the store knows.
func (s *server) agents(ctx context.Context) ([]Agent, error) {
	// The fleet first: an agent is live in it only once its registration
	// committed, so the store read that follows has its row (its
	// coordinator among it). Read the other way round, an agent that
	// registered between the two reads showed connected to no server.
	byID := map[string]Agent{}
	if s.Fleet != nil {
		for _, v := range s.Fleet.Agents() {
			byID[v.ID] = agentDTO(v)
		}
	}
	recs, err := s.DB.Auth().ListAgents(ctx)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if a, ok := byID[rec.ID]; ok {
			if a.Hostname == "" {
				a.Hostname = rec.Hostname
			}
			if a.Version == "" {
				a.Version = rec.Version
			}
			if a.TokenID == "" { // the fleet does not say; the store has the registration's
				a.TokenID = rec.TokenID
			}
			a.Coordinator = rec.CoordinatorURL
			byID[rec.ID] = a
			continue
		}
		if rec.Connected && rec.CoordinatorURL != "" && rec.Coordinator != s.Coordinator {
			// B145: connected to another server sharing the database
			// (whose row is alive: a dead one's agents are disconnected
			// by the leader).
			byID[rec.ID] = Agent{
				ID: rec.ID, State: AgentConnected, Connected: true, Healthy: true,
				MaxJobs: rec.MaxJobs, ActiveJobs: rec.ActiveJobs,
				Labels: orEmptyLabels(rec.Labels.Labels), Mandatory: nilIfEmpty(rec.Labels.Mandatory),
				ConnectedAt: tp(rec.RegisteredAt), LastSeen: tp(rec.LastSeenAt), Version: rec.Version,
				Hostname: rec.Hostname, TokenID: rec.TokenID, Coordinator: rec.CoordinatorURL,
			}
			continue
		}
		byID[rec.ID] = Agent{
			ID: rec.ID, State: AgentDisconnected, Labels: orEmptyLabels(rec.Labels.Labels), Mandatory: rec.Labels.Mandatory,
			LastSeen: tp(rec.LastSeenAt), Version: rec.Version, Hostname: rec.Hostname, TokenID: rec.TokenID,
		}
		if len(rec.Labels.Mandatory) == 0 {
			a := byID[rec.ID]
			a.Mandatory = nil
			byID[rec.ID] = a
		}
	}
	out := make([]Agent, 0, len(byID))
	for _, a := range byID {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func nilIfEmpty(l kiln.Labels) kiln.Labels {
	if len(l) == 0 {
		return nil
	}
	return l
}

func (s *server) listAgents(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	agents, err := s.agents(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, AgentList{Agents: agents})
	return nil
}

func (s *server) drainAgent(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	if s.Fleet == nil {
		return errorf(kiln.CodeUnavailable, "this server has no agent fleet to drain")
	}
	if err := s.Fleet.Drain(id); err != nil {
		if kiln.ErrorCode(err) == codeNotFound {
			return errorf(codeNotFound, "agent %.80q is not connected", id)
		}
		return err
	}
	agents, err := s.agents(r.Context())
	if err != nil {
		return err
	}
	for _, a := range agents {
		if a.ID == id {
			writeJSON(w, http.StatusOK, a)
			return nil
		}
	}
	writeJSON(w, http.StatusOK, Agent{ID: id, State: AgentDraining, Draining: true, Labels: kiln.Labels{}})
	return nil
}

// Queue is the dispatch queue: how many unfinished jobs there are in each
// status, how many queued jobs ask for each label, and every queued job
// with why it waits.
type Queue struct {
	Depth   map[kiln.JobStatus]int `json:"depth"`
	ByLabel map[string]int         `json:"by_label"`
	Waiting []WaitingJob           `json:"waiting"`
}

// WaitingJob is a queued job, or one held for an admin's approval
// (status pending), and why it waits.
type WaitingJob struct {
	JobID                 string         `json:"job_id"`
	Status                kiln.JobStatus `json:"status"`
	Job                   string         `json:"job"`
	RunID                 string         `json:"run_id"`
	RunNumber             int64          `json:"run_number"`
	Workflow              string         `json:"workflow"`
	RunsOn                kiln.Labels    `json:"runs_on"`
	ExcludeLabels         kiln.Labels    `json:"exclude_labels,omitempty"`
	Reason                string         `json:"reason,omitempty"`
	Since                 *time.Time     `json:"since,omitempty"` // when Reason was set
	QueuedAt              *time.Time     `json:"queued_at,omitempty"`
	ExpiresAt             *time.Time     `json:"expires_at,omitempty"`
	Dispatches            int            `json:"dispatches,omitempty"`
	LastProvisioningError string         `json:"last_provisioning_error,omitempty"`
}

func (s *server) queue(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "limit"); err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 100, 1, maxListLimit)
	if err != nil {
		return err
	}
	depth, err := s.DB.Queue().Depth(r.Context())
	if err != nil {
		return err
	}
	waiting, err := s.DB.Queue().Waiting(r.Context(), int(limit))
	if err != nil {
		return err
	}
	out := Queue{Depth: depth.ByStatus, ByLabel: depth.ByLabel, Waiting: make([]WaitingJob, len(waiting))}
	for i, wj := range waiting {
		out.Waiting[i] = WaitingJob{
			JobID: wj.ID, Status: wj.Status, Job: wj.Name, RunID: wj.RunID, RunNumber: wj.RunNumber, Workflow: wj.Workflow,
			RunsOn: orEmptyLabels(wj.Requirement.RunsOn), ExcludeLabels: wj.Requirement.Exclude,
			Reason: wj.Reason, Since: tp(wj.Since), QueuedAt: tp(wj.QueuedAt), ExpiresAt: tp(wj.ExpiresAt),
			Dispatches: wj.Attempts, LastProvisioningError: wj.LastProvisioningError,
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
