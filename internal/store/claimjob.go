package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kilnci/kiln"
)

// ClaimJob claims one queued job by id for an agent, as Claim would claim
// it: the job a scaler started the agent for goes to that agent while it
// is still queued. It returns nil, and changes nothing, when the job is no
// longer queued, is stopping or expired, or is one the agent does not
// accept.
func (q Queue) ClaimJob(ctx context.Context, agentID string, agent kiln.AgentLabels, jobID string) (*Claimed, error) {
	if agentID == "" || jobID == "" {
		return nil, invalid("a claim needs an agent id and a job id")
	}
	var out *Claimed
	err := q.h.write(ctx, func(t *txn) error {
		out = nil
		var key string
		err := t.queryRow(ctx, "SELECT queue_key FROM jobs WHERE id = ? AND status = 'queued' AND stop = 0", jobID).Scan(&key)
		if isNoRows(err) || err == nil && !agent.Accepts(KeyRequirement(key)) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim job: %w", err)
		}
		now, ack := ms(t.now), ms(t.now.Add(t.db.cfg.AckTimeout))
		var c Claimed
		var spec string
		var queued sql.NullInt64
		err = t.queryRow(ctx, "UPDATE jobs SET "+claimSet("", "?")+` WHERE id = ? AND status = 'queued' AND stop = 0
			AND (expires_at IS NULL OR expires_at > ?) RETURNING id, run_id, name, lease_epoch, attempts, `+specOf("jobs")+`, queue_key, queued_at`,
			agentID, now, ack, now, now, jobID, now).Scan(&c.JobID, &c.RunID, &c.Name, &c.Epoch, &c.Attempt, &spec, &key, &queued)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim job: %w", err)
		}
		c.Spec, c.Requirement, c.AckDeadline = json.RawMessage(spec), KeyRequirement(key), time.UnixMilli(ack).UTC()
		c.QueuedAt = fromMS(queued)
		t.event(c.RunID, c.JobID, EventDispatched, dispatchDetail(c.Attempt, agentID))
		// The caller reports the run's start (RunStarted), as for Claim.
		var id string
		err = t.queryRow(ctx, `UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?), updated_at = ?
			WHERE id = ? AND status = 'pending' RETURNING id`, now, now, c.RunID).Scan(&id)
		switch {
		case err == nil:
			c.RunStarted = true
		case !isNoRows(err):
			return fmt.Errorf("claim job: start run: %w", err)
		}
		out = &c
		return nil
	})
	return out, err
}
