package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// claimSQLiteMany claims for several agents that accept the same keys in
// one statement, as claimPostgres does: the oldest jobs of the keys,
// numbered in id order, slot n to the ask that owns it (the first ask gets
// the oldest jobs). In process a statement costs no round trip, but each
// still opens its cursors and walks the keys' index again; the committer's
// complete-and-claim asks for a batch of agents at once. One ask is
// claimSQLite's statement, already compiled.
func claimSQLiteMany(ctx context.Context, t *txn, keys []string, asks []claimAsk) ([][]Claimed, error) {
	if len(asks) == 1 {
		cs, err := claimSQLite(ctx, t, keys, asks[0].agentID, asks[0].slots)
		return [][]Claimed{cs}, err
	}
	total := 0
	owner := map[string][]int{} // the asks of each agent, in order
	slots := make([]string, 0, len(asks))
	for i, a := range asks {
		total += a.slots
		owner[a.agentID] = append(owner[a.agentID], i)
		for range a.slots {
			slots = append(slots, a.agentID)
		}
	}
	who, err := json.Marshal(slots)
	if err != nil {
		return nil, err
	}
	now, ack := ms(t.now), ms(t.now.Add(t.db.cfg.AckTimeout))
	var args []any
	branches := make([]string, len(keys))
	for i, k := range keys {
		branches[i] = "SELECT id FROM (" + claimBranch + ")"
		args = append(args, k, now, total)
	}
	args = append(args, total, string(who), now, ack, now, now)
	// RETURNING sees only the claimed table, so a row names its ask by
	// its agent: an agent's rows, in id order, fill its asks in order,
	// as the slots were numbered.
	q := "WITH pick AS (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM (" + strings.Join(branches, " UNION ALL ") +
		" ORDER BY id LIMIT +?)), who AS (SELECT key + 1 AS rn, value AS agent FROM json_each(?)) " +
		"UPDATE jobs SET " + claimSet("", "who.agent") + " FROM pick JOIN who ON who.rn = pick.rn " +
		"WHERE jobs.id = pick.id AND jobs.status = 'queued' " +
		"RETURNING id, run_id, name, lease_epoch, attempts, " + specOf("jobs") + ", queue_key, queued_at, " +
		"(SELECT status = 'pending' FROM runs WHERE runs.id = jobs.run_id), agent_id"
	agents := map[string]string{}
	rows, err := t.query(ctx, q, args...)
	claimed, pending, err := scanClaimedRuns(rows, err, agents)
	if err != nil {
		return nil, err
	}
	// claimed is in id order, as the slots were numbered.
	out := make([][]Claimed, len(asks))
	next := map[string]int{} // how far into its asks each agent is
	for _, c := range claimed {
		c.AckDeadline = time.UnixMilli(ack).UTC()
		agent := agents[c.JobID]
		for k := next[agent]; k < len(owner[agent]); k++ {
			if i := owner[agent][k]; len(out[i]) < asks[i].slots {
				out[i] = append(out[i], c)
				t.event(c.RunID, c.JobID, EventDispatched, dispatchDetail(c.Attempt, agent))
				break
			}
			next[agent] = k + 1
		}
	}
	started, err := t.startClaimedRuns(ctx, claimed, pending)
	if err != nil {
		return nil, err
	}
	for i := range out {
		markRunStarts(out[i], started)
	}
	return out, nil
}
