package api

import (
	"context"
	"net/http"
	"time"

	"github.com/kilnci/kiln"
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

// Scalers lists the configured scalers.
func (c *Client) Scalers(ctx context.Context) ([]Scaler, error) {
	var out ScalerList
	_, err := c.do(ctx, "GET", "/api/v1/scalers", nil, nil, &out)
	return out.Scalers, err
}
