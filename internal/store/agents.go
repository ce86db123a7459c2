package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/kilnci/kiln"
)

// AgentRecord is an agent as the agents table lists it. The live registry is
// in memory (fleet); this table is what an operator lists and what survives
// a restart.
type AgentRecord struct {
	ID           string
	Labels       kiln.AgentLabels
	TokenID      string
	Hostname     string
	Version      string
	Connected    bool
	RegisteredAt time.Time
	LastSeenAt   time.Time
	// Coordinator is the id of the coordinator the agent is (or was last)
	// connected to; CoordinatorURL its advertise URL while it is alive.
	Coordinator    string
	CoordinatorURL string
	// MaxJobs is how many jobs the agent takes at once (0: not known);
	// ActiveJobs, filled by ListAgents, how many it holds now (dispatched,
	// running or cancelling), as the database knows them.
	MaxJobs    int
	ActiveJobs int
}

// UpsertAgent records an agent's registration: labels, token, host and
// version, connected, seen now.
func (a Auth) UpsertAgent(ctx context.Context, r AgentRecord) error {
	if r.ID == "" {
		return invalid("an agent needs an id")
	}
	return a.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		_, err := t.exec(ctx, `INSERT INTO agents (id, labels, mandatory, token_id, hostname, version, connected, registered_at, last_seen_at, coordinator_id, max_jobs)
			VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET labels = excluded.labels, mandatory = excluded.mandatory, token_id = excluded.token_id,
				hostname = excluded.hostname, version = excluded.version, connected = 1,
				registered_at = excluded.registered_at, last_seen_at = excluded.last_seen_at, coordinator_id = excluded.coordinator_id,
				max_jobs = excluded.max_jobs`,
			r.ID, r.Labels.Labels.Key(), r.Labels.Mandatory.Key(), r.TokenID, r.Hostname, r.Version, now, now, r.Coordinator, r.MaxJobs)
		return err
	})
}

// SetAgentConnected records a connect or disconnect (and that the agent was
// seen now).
func (a Auth) SetAgentConnected(ctx context.Context, id string, connected bool) error {
	return a.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "UPDATE agents SET connected = ?, last_seen_at = ? WHERE id = ?", boolInt(connected), ms(t.now), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("agent %s is not registered", id)
		}
		return nil
	})
}

// KnownLabels returns the distinct label sets of the agents connected or
// seen since then: what the queue's sweeps ask of the fleet each second.
// A thousand agents started from one template are one row here, where
// ListAgents reads and decodes each of them, and counts their jobs.
func (a Auth) KnownLabels(ctx context.Context, since time.Time) ([]kiln.AgentLabels, error) {
	rows, err := a.h.reader().query(ctx, `SELECT DISTINCT labels, mandatory FROM agents
		WHERE connected = 1 OR last_seen_at >= ?`, ms(since))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []kiln.AgentLabels
	for rows.Next() {
		var labels, mandatory string
		if err := rows.Scan(&labels, &mandatory); err != nil {
			return nil, err
		}
		out = append(out, kiln.AgentLabels{Labels: kiln.ParseLabelsKey(labels), Mandatory: kiln.ParseLabelsKey(mandatory)})
	}
	return out, rows.Err()
}

// ListAgents lists registered agents by id.
func (a Auth) ListAgents(ctx context.Context) ([]AgentRecord, error) {
	rows, err := a.h.reader().query(ctx, `SELECT a.id, a.labels, a.mandatory, a.token_id, a.hostname, a.version, a.connected,
			a.registered_at, a.last_seen_at, a.coordinator_id, COALESCE(c.advertise_url, ''), a.max_jobs
		FROM agents a LEFT JOIN coordinators c ON c.id = a.coordinator_id ORDER BY a.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AgentRecord
	for rows.Next() {
		var r AgentRecord
		var labels, mandatory string
		var registered, seen sql.NullInt64
		if err := rows.Scan(&r.ID, &labels, &mandatory, &r.TokenID, &r.Hostname, &r.Version, &r.Connected, &registered, &seen, &r.Coordinator, &r.CoordinatorURL, &r.MaxJobs); err != nil {
			return nil, err
		}
		r.Labels = kiln.AgentLabels{Labels: kiln.ParseLabelsKey(labels), Mandatory: kiln.ParseLabelsKey(mandatory)}
		r.RegisteredAt, r.LastSeenAt = fromMS(registered), fromMS(seen)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	// The jobs each agent holds, from the few jobs in those states (their
	// partial indexes), not a scan per agent.
	held, err := a.h.reader().query(ctx, `SELECT agent_id, COUNT(*) FROM jobs
		WHERE status IN ('dispatched', 'running', 'cancelling') AND agent_id IS NOT NULL GROUP BY agent_id`)
	if err != nil {
		return nil, err
	}
	defer held.Close()
	active := map[string]int{}
	for held.Next() {
		var id string
		var n int
		if err := held.Scan(&id, &n); err != nil {
			return nil, err
		}
		active[id] = n
	}
	for i := range out {
		out[i].ActiveJobs = active[out[i].ID]
	}
	return out, held.Err()
}
