package store

import (
	"context"
	"fmt"
	"github.com/kilnci/kiln"
	"time"
)

// Artifacts records the artifacts jobs uploaded: one row per name in a
// run, written when the upload completed (the body is in the storage
// backend under StorageKey).
type Artifacts struct{ h handle }

// Artifacts is the accessor for uploaded artifacts.
func (db *DB) Artifacts() Artifacts { return Artifacts{h: handle{db: db}} }

// Artifact is one uploaded artifact.
type Artifact struct {
	RunID      string
	Name       string
	JobID      string
	JobName    string // read only
	StorageKey string
	Size       int64
	Files      int64
	CreatedAt  time.Time
}

// Record stores an artifact a job uploaded. The name is unique in its run:
// another job's artifact of that name is ErrConflict; the same job's (a
// later attempt) is replaced.
func (a Artifacts) Record(ctx context.Context, art Artifact) error {
	if art.RunID == "" || art.Name == "" || art.JobID == "" || art.StorageKey == "" {
		return invalid("artifact %q of run %s is incomplete", art.Name, art.RunID)
	}
	return a.h.write(ctx, func(t *txn) error {
		var owner string
		err := t.queryRow(ctx, "SELECT job_id FROM artifacts WHERE run_id = ? AND name = ?", art.RunID, art.Name).Scan(&owner)
		switch {
		case isNoRows(err):
		case err != nil:
			return err
		case owner != art.JobID:
			return conflict("another job of this run already uploaded an artifact named %q; "+
				"names are unique in a run (a matrix job's should include its matrix values)", art.Name)
		}
		if _, err := t.exec(ctx, `INSERT INTO artifacts (run_id, name, job_id, storage_key, size, files, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, name) DO UPDATE SET
			storage_key = excluded.storage_key, size = excluded.size, files = excluded.files, created_at = excluded.created_at`,
			art.RunID, art.Name, art.JobID, art.StorageKey, art.Size, art.Files, ms(t.now)); err != nil {
			return fmt.Errorf("record artifact: %w", err)
		}
		return nil
	})
}

// Owner returns the job that uploaded the run's artifact name ("" when
// none did).
func (a Artifacts) Owner(ctx context.Context, runID, name string) (string, error) {
	var owner string
	err := a.h.reader().queryRow(ctx, "SELECT job_id FROM artifacts WHERE run_id = ? AND name = ?", runID, name).Scan(&owner)
	if isNoRows(err) {
		return "", nil
	}
	return owner, err
}

const artifactCols = `a.run_id, a.name, a.job_id, COALESCE(j.name, ''), a.storage_key, a.size, a.files, a.created_at
	FROM artifacts a LEFT JOIN jobs j ON j.id = a.job_id`

// List returns a run's artifacts by name.
func (a Artifacts) List(ctx context.Context, runID string) ([]Artifact, error) {
	return a.query(ctx, "SELECT "+artifactCols+" WHERE a.run_id = ? ORDER BY a.name", runID)
}

// Get returns one artifact of a run; ErrNotFound if there is none.
func (a Artifacts) Get(ctx context.Context, runID, name string) (Artifact, error) {
	out, err := a.query(ctx, "SELECT "+artifactCols+" WHERE a.run_id = ? AND a.name = ?", runID, name)
	if err != nil {
		return Artifact{}, err
	}
	if len(out) == 0 {
		return Artifact{}, notFound("the run has no artifact %q", name)
	}
	return out[0], nil
}

// OfNeeds returns the artifacts the direct needs of a job uploaded (every
// child of a matrix need), by name: what the job gets before its first
// step.
func (a Artifacts) OfNeeds(ctx context.Context, jobID string) ([]Artifact, error) {
	return a.query(ctx, "SELECT "+artifactCols+`
		JOIN jobs me ON me.id = ? AND me.run_id = a.run_id
		JOIN needs n ON n.job_id = me.id AND n.upstream = j.base
		ORDER BY a.name`, jobID)
}

func (a Artifacts) query(ctx context.Context, q string, args ...any) ([]Artifact, error) {
	rows, err := a.h.reader().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list artifacts: %w", err)
	}
	defer rows.Close()
	var out []Artifact
	for rows.Next() {
		var art Artifact
		var created int64
		if err := rows.Scan(&art.RunID, &art.Name, &art.JobID, &art.JobName, &art.StorageKey, &art.Size, &art.Files, &created); err != nil {
			return nil, err
		}
		art.CreatedAt = time.UnixMilli(created).UTC()
		out = append(out, art)
	}
	return out, rows.Err()
}

// Holder checks a request an agent makes about a job it runs (an artifact
// transfer): the token secret is valid, the agent registered with it, and
// it holds the job under epoch, not yet ended. It returns the job's run
// id; anything else is ErrUnauthorized (a bad token or agent) or
// ErrStaleLease.
func (a Artifacts) Holder(ctx context.Context, secret, agentID, jobID string, epoch int64) (string, error) {
	tk, err := Auth(a).VerifyAgentToken(ctx, secret)
	if err != nil {
		return "", err
	}
	var runID, status, holder, tokenID string
	var held int64
	err = a.h.reader().queryRow(ctx, `SELECT j.run_id, j.status, COALESCE(j.agent_id, ''), j.lease_epoch, COALESCE(ag.token_id, '')
		FROM jobs j LEFT JOIN agents ag ON ag.id = ? WHERE j.id = ?`, agentID, jobID).Scan(&runID, &status, &holder, &held, &tokenID)
	switch {
	case isNoRows(err):
		return "", staleLease("no job %s", jobID)
	case err != nil:
		return "", err
	case tokenID != tk.ID:
		return "", newError(ErrUnauthorized, "agent %s did not register with this token", agentID)
	case holder != agentID || held != epoch || kiln.JobStatus(status).Terminal():
		return "", staleLease("agent %s does not hold job %s under lease epoch %d", agentID, jobID, epoch)
	}
	return runID, nil
}
