package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/kilnci/kiln"
)

var jobCols = `id, run_id, idx, name, base, matrix, status, COALESCE(result, ''), COALESCE(error, ''),
	max_parallel, fail_fast, on_agent_lost, ` + specOf("jobs") + `, queue_key, stop, COALESCE(agent_id, ''), lease_epoch, attempts,
	COALESCE(pending_reason, ''), pending_since, COALESCE(last_provisioning_error, ''), queued_at, expires_at,
	dispatched_at, started_at, last_heartbeat_at, finished_at, COALESCE(outputs, '')`

func scanJob(rows interface{ Scan(...any) error }) (Job, error) {
	var j Job
	var matrix, spec, key, outputs string
	var pendingSince, queued, expires, dispatched, started, heartbeat, finished sql.NullInt64
	var kr keyReason
	var updated int64
	err := rows.Scan(&j.ID, &j.RunID, &j.Index, &j.Name, &j.Base, &matrix, &j.Status, &j.Result, &j.Error,
		&j.MaxParallel, &j.FailFast, &j.OnAgentLost, &spec, &key, &j.Stopped, &j.AgentID, &j.LeaseEpoch, &j.Attempts,
		&j.PendingReason, &pendingSince, &j.LastProvisioningError, &queued, &expires,
		&dispatched, &started, &heartbeat, &finished, &outputs,
		&kr.reason, &kr.since, &kr.decided, &updated)
	if err != nil {
		return j, err
	}
	j.Matrix, j.Spec = json.RawMessage(matrix), json.RawMessage(spec)
	j.Requirement = kiln.ParseRequirementKey(key)
	j.PendingSince, j.QueuedAt, j.ExpiresAt = fromMS(pendingSince), fromMS(queued), fromMS(expires)
	j.DispatchedAt, j.StartedAt, j.LastHeartbeatAt, j.FinishedAt = fromMS(dispatched), fromMS(started), fromMS(heartbeat), fromMS(finished)
	kr.apply(&j.PendingReason, &j.PendingSince, j.QueuedAt, updated, j.LastProvisioningError != "")
	if outputs != "" {
		if err := json.Unmarshal([]byte(outputs), &j.Outputs); err != nil {
			return j, fmt.Errorf("job %s outputs: %w", j.ID, err)
		}
	}
	return j, nil
}

// loadJobsSQL selects jobs with their key's pending reason, up to WHERE.
var loadJobsSQL = "SELECT " + jobCols + ", " + keyReasonCols("jobs") + " FROM jobs " + keyReasonJoin("jobs") + " WHERE "

// loadJobs reads jobs with their needs edges and steps.
func loadJobs(ctx context.Context, q querier, where string, args ...any) ([]Job, error) {
	rows, err := q.query(ctx, loadJobsSQL+where, args...)
	if err != nil {
		return nil, fmt.Errorf("load jobs: %w", err)
	}
	var jobs []Job
	index := map[string]int{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		index[j.ID] = len(jobs)
		jobs = append(jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(jobs) == 0 {
		return jobs, err
	}
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	for start := 0; start < len(ids); start += 500 {
		chunk := anys(ids[start:min(start+500, len(ids))])
		if err := loadNeedsOf(ctx, q, chunk, jobs, index); err != nil {
			return nil, err
		}
		if err := loadStepsOf(ctx, q, chunk, jobs, index); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

func loadNeedsOf(ctx context.Context, q querier, ids []any, jobs []Job, index map[string]int) error {
	rows, err := q.query(ctx, "SELECT job_id, upstream, accept FROM needs WHERE job_id IN ("+marks(len(ids))+") ORDER BY job_id, upstream", ids...)
	if err != nil {
		return fmt.Errorf("load needs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, up, accept string
		if err := rows.Scan(&id, &up, &accept); err != nil {
			return err
		}
		j := &jobs[index[id]]
		j.Needs = append(j.Needs, NeedEdge{Job: up, Accept: parseResults(accept)})
	}
	return rows.Err()
}

func loadStepsOf(ctx context.Context, q querier, ids []any, jobs []Job, index map[string]int) error {
	rows, err := q.query(ctx, `SELECT job_id, idx, name, status, exit_code, COALESCE(error, ''), started_at, finished_at
		FROM steps WHERE job_id IN (`+marks(len(ids))+`) ORDER BY job_id, idx`, ids...)
	if err != nil {
		return fmt.Errorf("load steps: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var s Step
		var exit, started, finished sql.NullInt64
		if err := rows.Scan(&id, &s.Index, &s.Name, &s.Status, &exit, &s.Error, &started, &finished); err != nil {
			return err
		}
		if exit.Valid {
			code := int(exit.Int64)
			s.ExitCode = &code
		}
		s.StartedAt, s.FinishedAt = fromMS(started), fromMS(finished)
		j := &jobs[index[id]]
		j.Steps = append(j.Steps, s)
	}
	return rows.Err()
}

// specOf is, as a column, the spec of the job a query's row alias names.
// Specs have a table of their own (job_specs, migration 0022): a job's row
// changes at every step through the queue, its spec at most once.
func specOf(alias string) string {
	return "(SELECT spec FROM job_specs WHERE job_specs.job_id = " + alias + ".id)"
}
