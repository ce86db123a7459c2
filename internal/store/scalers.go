package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/kilnci/kiln"
)

// Scalers keeps the agents scalers start: one scaler_spawns row per spawn,
// claimed before the backend is asked, so that with several servers on one
// database a queued job gets one spawn, not one per server.
type Scalers struct{ h handle }

// Scalers runs spawn operations in their own transactions.
func (db *DB) Scalers() Scalers { return Scalers{h: handle{db: db}} }

// Scalers runs spawn operations inside this transaction.
func (tx *Tx) Scalers() Scalers { return Scalers{h: tx.handle()} }

// Spawn states.
const (
	SpawnSpawning   = "spawning"
	SpawnRunning    = "running"
	SpawnDestroying = "destroying"
)

// Spawn is one agent a scaler started or is starting.
type Spawn struct {
	AgentID      string
	Scaler       string
	JobID        string // "" for a warm-pool agent
	RunID        string
	Labels       kiln.Labels
	Owner        string // the server instance that started it
	TokenID      string
	State        string
	StartedAt    time.Time
	RegisteredAt time.Time
}

const spawnCols = `agent_id, scaler, COALESCE(job_id, ''), COALESCE(run_id, ''), labels, owner, token_id, state, started_at, registered_at`

func scanSpawn(r interface{ Scan(...any) error }) (Spawn, error) {
	var s Spawn
	var labels string
	var started int64
	var registered sql.NullInt64
	err := r.Scan(&s.AgentID, &s.Scaler, &s.JobID, &s.RunID, &labels, &s.Owner, &s.TokenID, &s.State, &started, &registered)
	s.Labels = kiln.ParseLabelsKey(labels)
	s.StartedAt, s.RegisteredAt = time.UnixMilli(started).UTC(), fromMS(registered)
	return s, err
}

// Claim records a spawn about to start. For a job-bound spawn it reports
// false, recording nothing, when the job already has a spawn (another
// server's, or an earlier one still running) or is no longer queued.
func (s Scalers) Claim(ctx context.Context, sp Spawn) (bool, error) {
	if sp.AgentID == "" || sp.Scaler == "" || sp.Owner == "" {
		return false, invalid("a spawn needs an agent id, a scaler and an owner")
	}
	var ok bool
	err := s.h.write(ctx, func(t *txn) error {
		var job, run any
		if sp.JobID != "" {
			var n int
			if err := t.queryRow(ctx, "SELECT COUNT(*) FROM jobs WHERE id = ? AND status = 'queued'", sp.JobID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				ok = false
				return nil
			}
			job, run = sp.JobID, sp.RunID
		}
		res, err := t.exec(ctx, `INSERT INTO scaler_spawns (agent_id, scaler, job_id, run_id, labels, owner, token_id, state, started_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'spawning', ?) ON CONFLICT DO NOTHING`,
			sp.AgentID, sp.Scaler, job, run, sp.Labels.Key(), sp.Owner, sp.TokenID, ms(t.now))
		if err != nil {
			return fmt.Errorf("claim spawn: %w", err)
		}
		n, _ := res.RowsAffected()
		ok = n == 1
		return nil
	})
	return ok, err
}

// SetToken records the ephemeral token made for a claimed spawn.
func (s Scalers) SetToken(ctx context.Context, agentID, tokenID string) error {
	return s.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "UPDATE scaler_spawns SET token_id = ? WHERE agent_id = ?", tokenID, agentID)
		return err
	})
}

// Registered marks a spawn's agent registered and returns the spawn; it
// returns ErrNotFound for an agent no scaler started.
func (s Scalers) Registered(ctx context.Context, agentID string) (Spawn, error) {
	var sp Spawn
	err := s.h.write(ctx, func(t *txn) error {
		var err error
		sp, err = scanSpawn(t.queryRow(ctx, `UPDATE scaler_spawns SET state = CASE WHEN state = 'spawning' THEN 'running' ELSE state END,
			registered_at = COALESCE(registered_at, ?) WHERE agent_id = ? RETURNING `+spawnCols, ms(t.now), agentID))
		if isNoRows(err) {
			return notFound("spawned agent %s", agentID)
		}
		return err
	})
	return sp, err
}

// Get returns one spawn.
func (s Scalers) Get(ctx context.Context, agentID string) (Spawn, error) {
	sp, err := scanSpawn(s.h.reader().queryRow(ctx, "SELECT "+spawnCols+" FROM scaler_spawns WHERE agent_id = ?", agentID))
	if isNoRows(err) {
		return sp, notFound("spawned agent %s", agentID)
	}
	return sp, err
}

// Release forgets a spawn (destroyed, failed or pruned) and revokes its
// token, so the agent it was for can never register again; its agent, no
// longer connected, leaves the agents list (an agent used for one job
// would otherwise stay there for good). It reports whether the spawn was
// there.
func (s Scalers) Release(ctx context.Context, agentID string) (bool, error) {
	var ok bool
	err := s.h.write(ctx, func(t *txn) error {
		var token string
		err := t.queryRow(ctx, "DELETE FROM scaler_spawns WHERE agent_id = ? RETURNING token_id", agentID).Scan(&token)
		if isNoRows(err) {
			ok = false
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		if token != "" {
			if _, err := t.exec(ctx, "UPDATE agent_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?", ms(t.now), token); err != nil {
				return err
			}
		}
		_, err = t.exec(ctx, "DELETE FROM agents WHERE id = ? AND connected = 0", agentID)
		return err
	})
	return ok, err
}

// List returns the spawns of owner ("": of every server), oldest first.
func (s Scalers) List(ctx context.Context, owner string) ([]Spawn, error) {
	q := "SELECT " + spawnCols + " FROM scaler_spawns"
	var args []any
	if owner != "" {
		q += " WHERE owner = ?"
		args = append(args, owner)
	}
	rows, err := s.h.reader().query(ctx, q+" ORDER BY started_at, agent_id", args...)
	if err != nil {
		return nil, fmt.Errorf("list spawns: %w", err)
	}
	defer rows.Close()
	var out []Spawn
	for rows.Next() {
		sp, err := scanSpawn(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, rows.Err()
}

// Count returns how many spawns each scaler has, every server's.
func (s Scalers) Count(ctx context.Context) (map[string]int, error) {
	rows, err := s.h.reader().query(ctx, "SELECT scaler, COUNT(*) FROM scaler_spawns GROUP BY scaler")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] = n
	}
	return out, rows.Err()
}

// UnservedJob is a queued job no agent took and no spawn serves yet.
type UnservedJob struct {
	ID, RunID   string
	Requirement kiln.Requirement
}

// Unserved lists up to limit of the oldest queued jobs with the routing key
// that have no spawn, and are not bound to expire before now.
func (s Scalers) Unserved(ctx context.Context, key string, limit int) ([]UnservedJob, error) {
	rows, err := s.h.reader().query(ctx, `SELECT id, run_id FROM jobs WHERE status = 'queued' AND queue_key = ? AND stop = 0
		AND NOT EXISTS (SELECT 1 FROM scaler_spawns s WHERE s.job_id = jobs.id) ORDER BY id LIMIT ?`, key, limit)
	if err != nil {
		return nil, fmt.Errorf("unserved jobs: %w", err)
	}
	defer rows.Close()
	var out []UnservedJob
	for rows.Next() {
		j := UnservedJob{Requirement: KeyRequirement(key)}
		if err := rows.Scan(&j.ID, &j.RunID); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}
