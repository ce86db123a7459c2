package store

import (
	"context"
	"database/sql"
	"time"
)

// Coordinator is a server process sharing the database: a row written at its
// start and on every cluster heartbeat, deleted at its clean stop.
type Coordinator struct {
	ID           string // random per process start
	AdvertiseURL string // where agents reach it
	StartedAt    time.Time
	HeartbeatAt  time.Time
}

// Beat records that coordinator id is alive now (inserting its row on the
// first beat).
func (c Cluster) Beat(ctx context.Context, id, advertiseURL string) error {
	if id == "" {
		return invalid("a coordinator needs an id")
	}
	return c.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		_, err := t.exec(ctx, `INSERT INTO coordinators (id, advertise_url, started_at, heartbeat_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET advertise_url = excluded.advertise_url, heartbeat_at = excluded.heartbeat_at`,
			id, advertiseURL, now, now)
		return err
	})
}

// Leave deletes a coordinator's row (a clean stop, or a dead one the leader
// has dealt with): its agents then count as orphans at once.
func (c Cluster) Leave(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	return c.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "DELETE FROM coordinators WHERE id IN ("+marks(len(ids))+")", anys(ids)...)
		return err
	})
}

// Coordinators lists every coordinator row, oldest start first.
func (c Cluster) Coordinators(ctx context.Context) ([]Coordinator, error) {
	rows, err := c.h.reader().query(ctx, "SELECT id, advertise_url, started_at, heartbeat_at FROM coordinators ORDER BY started_at, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Coordinator
	for rows.Next() {
		var k Coordinator
		var started, beat sql.NullInt64
		if err := rows.Scan(&k.ID, &k.AdvertiseURL, &started, &beat); err != nil {
			return nil, err
		}
		k.StartedAt, k.HeartbeatAt = fromMS(started), fromMS(beat)
		out = append(out, k)
	}
	return out, rows.Err()
}

// Fence fails with ErrConflict unless l is still held, unexpired, at its
// epoch. The leader calls it first in the transaction of each leader-only
// write, so a leader that lost its lease (paused, cut off) changes nothing:
// on PostgreSQL the row is read FOR SHARE, so a new leader's acquisition
// waits for this transaction, which therefore commits under the old term or
// not at all. On SQLite the transaction holds the only writer.
func (c Cluster) Fence(ctx context.Context, l LeaderLease) error {
	return c.h.write(ctx, func(t *txn) error {
		q := "SELECT epoch FROM leases WHERE name = ? AND holder = ? AND epoch = ? AND expires_at > ?"
		if t.db.dialect.name() == "postgres" {
			q += " FOR SHARE"
		}
		var epoch int64
		err := t.queryRow(ctx, q, l.Name, l.Holder, l.Epoch, ms(t.now)).Scan(&epoch)
		if isNoRows(err) {
			return conflict("lease %s is no longer held by %s at epoch %d", l.Name, l.Holder, l.Epoch)
		}
		return err
	})
}

// OrphanRef is an agent the database lists as connected to a coordinator
// that is not alive.
type OrphanRef struct {
	AgentID     string
	Coordinator string
}

// OrphanedAgents lists the agents recorded as connected to a coordinator
// other than self whose row is missing or last beat before liveSince (a
// dead, killed or restarted server). On PostgreSQL their rows are locked,
// so a registration of the same agent on another coordinator waits for the
// caller's transaction.
func (a Auth) OrphanedAgents(ctx context.Context, self string, liveSince time.Time) ([]OrphanRef, error) {
	var out []OrphanRef
	err := a.h.write(ctx, func(t *txn) error {
		out = nil
		q := `SELECT id, coordinator_id FROM agents WHERE connected = 1 AND coordinator_id <> ?
			AND coordinator_id NOT IN (SELECT id FROM coordinators WHERE heartbeat_at >= ?) ORDER BY id`
		if t.db.dialect.name() == "postgres" {
			q += " FOR UPDATE"
		}
		rows, err := t.query(ctx, q, self, ms(liveSince))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r OrphanRef
			if err := rows.Scan(&r.AgentID, &r.Coordinator); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// Prune deletes the rows of coordinators silent since before liveSince
// (the leader calls it once their agents are dealt with).
func (c Cluster) Prune(ctx context.Context, liveSince time.Time) error {
	return c.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "DELETE FROM coordinators WHERE heartbeat_at < ?", ms(liveSince))
		return err
	})
}

// ReleaseAgent records that the agent's connection to coordinator ended —
// only if the database still names coordinator as its holder. false: another
// coordinator holds the agent now (it reconnected there), and the caller
// must leave its jobs alone. An agent with no row at all counts as held.
func (a Auth) ReleaseAgent(ctx context.Context, id, coordinator string) (bool, error) {
	held := false
	err := a.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "UPDATE agents SET connected = 0, last_seen_at = ? WHERE id = ? AND coordinator_id = ?",
			ms(t.now), id, coordinator)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			held = true
			return nil
		}
		var other string
		err = t.queryRow(ctx, "SELECT coordinator_id FROM agents WHERE id = ?", id).Scan(&other)
		if isNoRows(err) {
			held = true
			return nil
		}
		return err
	})
	return held, err
}

// AgentHolder says which coordinator holds a connected agent id — the one
// the database names, if its row beat since liveSince — and with which
// token ("" when the agent is not connected, unknown, or its coordinator
// is dead).
func (a Auth) AgentHolder(ctx context.Context, id string, liveSince time.Time) (coordinator, tokenID string, err error) {
	err = a.h.write(ctx, func(t *txn) error {
		err := t.queryRow(ctx, `SELECT a.coordinator_id, a.token_id FROM agents a JOIN coordinators c ON c.id = a.coordinator_id
			WHERE a.id = ? AND a.connected = 1 AND c.heartbeat_at >= ?`, id, ms(liveSince)).Scan(&coordinator, &tokenID)
		if isNoRows(err) {
			coordinator, tokenID = "", ""
			return nil
		}
		return err
	})
	return coordinator, tokenID, err
}

// HeldElsewhere returns, among ids, the agents the database lists as
// connected to a coordinator other than self: they reconnected elsewhere,
// and self's connections to them are stale.
func (a Auth) HeldElsewhere(ctx context.Context, self string, ids []string) ([]string, error) {
	var out []string
	for len(ids) > 0 {
		n := min(len(ids), 500)
		rows, err := a.h.reader().query(ctx, "SELECT id FROM agents WHERE connected = 1 AND coordinator_id <> ? AND id IN ("+marks(n)+")",
			append([]any{self}, anys(ids[:n])...)...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, id)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}
