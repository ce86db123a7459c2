package store

import (
	"context"
	"slices"
	"strings"

	"github.com/kilnci/kiln"
)

// ClaimAsk is one agent's part of ClaimFor.
type ClaimAsk struct {
	AgentID string
	Labels  kiln.AgentLabels
	Slots   int
}

// ClaimFor claims for several agents, each as Claim would, and returns each
// ask's jobs in order. Inside a transaction (the committer's
// complete-and-claim), asks that accept the same queued keys share one
// statement (the first ask gets the oldest jobs): a wave of a fleet's
// identical agents costs one round trip on PostgreSQL, not one per agent,
// and one walk of the keys' index on SQLite. An ask a shared statement left
// short is topped up alone, as Claim does when the cached keys were stale.
func (q Queue) ClaimFor(ctx context.Context, asks []ClaimAsk) ([][]Claimed, error) {
	for _, a := range asks {
		if a.Slots > 0 && a.AgentID == "" {
			return nil, invalid("a claim needs an agent id")
		}
	}
	out := make([][]Claimed, len(asks))
	db := q.h.db
	if q.h.tx == nil {
		for i, a := range asks {
			cs, err := q.Claim(ctx, a.AgentID, a.Labels, a.Slots)
			if err != nil {
				return nil, err
			}
			out[i] = cs
		}
		return out, nil
	}
	err := q.h.write(ctx, func(t *txn) error {
		keys, fresh, err := db.keys.get(ctx, t, false)
		if err != nil {
			return err
		}
		// The keys this transaction queued may be newer than the cache:
		// an inline claim after a run's creation then needs no read of
		// the queue's keys (a round trip on PostgreSQL) to find them.
		for _, k := range t.queuedKeys {
			if !slices.Contains(keys, k) {
				keys = append(slices.Clip(keys), k)
			}
		}
		tried := make([][]string, len(asks))
		for _, g := range groupAsks(asks, keys, tried) {
			cas := make([]claimAsk, len(g.idx))
			for j, i := range g.idx {
				cas[j] = claimAsk{agentID: asks[i].AgentID, slots: asks[i].Slots}
			}
			res, err := t.claimShared(ctx, g.keys, cas)
			if err != nil {
				return err
			}
			for j, i := range g.idx {
				out[i] = res[j]
			}
		}
		if fresh {
			return nil
		}
		// Keys the cache did not know yet: an ask left short tries them
		// alone, as Claim does.
		var reread []string
		for i, a := range asks {
			if a.Slots <= len(out[i]) {
				continue
			}
			if reread == nil {
				if reread, _, err = db.keys.get(ctx, t, true); err != nil {
					return err
				}
			}
			var extra []string
			for _, k := range acceptedKeys(reread, a.Labels) {
				if !slices.Contains(tried[i], k) {
					extra = append(extra, k)
				}
			}
			if len(extra) == 0 {
				continue
			}
			more, err := t.claimShared(ctx, extra, []claimAsk{{a.AgentID, a.Slots - len(out[i])}})
			if err != nil {
				return err
			}
			out[i] = append(out[i], more[0]...)
			sortClaimed(out[i])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimShared claims for asks accepting the same keys in one statement.
func (t *txn) claimShared(ctx context.Context, keys []string, asks []claimAsk) ([][]Claimed, error) {
	if t.db.dialect.name() == "sqlite" {
		return claimSQLiteMany(ctx, t, keys, asks)
	}
	return claimPostgres(ctx, t, t.db.keys.plans.tag(), t.now, t.db.cfg.AckTimeout, keys, asks)
}

// askGroup is the asks that accept the same keys.
type askGroup struct {
	keys []string
	idx  []int
}

// groupAsks groups the asks with free slots by the queued keys they accept,
// in ask order, and records each ask's keys in tried.
func groupAsks(asks []ClaimAsk, keys []string, tried [][]string) []*askGroup {
	var groups []*askGroup
	bySig := map[string]*askGroup{}
	for i, a := range asks {
		if a.Slots <= 0 || a.AgentID == "" {
			continue
		}
		ks := acceptedKeys(keys, a.Labels)
		tried[i] = ks
		if len(ks) == 0 {
			continue
		}
		sig := strings.Join(ks, "\x00")
		g := bySig[sig]
		if g == nil {
			g = &askGroup{keys: ks}
			bySig[sig] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	return groups
}
