package store

import (
	"context"
	"database/sql"
	"time"
)

// Cluster keeps what several coordinators share beyond the queue: named
// leases (leader election, with the epoch as a fencing token) and cron fire
// times.
type Cluster struct{ h handle }

// LeaderLease is a named lease and who holds it.
type LeaderLease struct {
	Name      string
	Holder    string
	Epoch     int64 // grows every time the lease changes hands or lapses
	ExpiresAt time.Time
}

// AcquireLease takes the named lease for holder for ttl if it is free,
// expired, or already holder's (then it is renewed, same epoch). ok is false
// when another holder has it; the lease returned is then theirs.
func (c Cluster) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (l LeaderLease, ok bool, err error) {
	if name == "" || holder == "" || ttl <= 0 {
		return LeaderLease{}, false, invalid("a lease needs a name, a holder and a positive ttl")
	}
	err = c.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		var until int64
		err := t.queryRow(ctx, `INSERT INTO leases (name, holder, epoch, expires_at) VALUES (?, ?, 1, ?)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
				epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > ? THEN leases.epoch ELSE leases.epoch + 1 END
			WHERE leases.expires_at <= ? OR leases.holder = excluded.holder
			RETURNING holder, epoch, expires_at`, name, holder, ms(t.now.Add(ttl)), now, now).Scan(&l.Holder, &l.Epoch, &until)
		if isNoRows(err) {
			ok = false
			l, err = readLease(ctx, t, name)
			return err
		}
		if err != nil {
			return err
		}
		ok = true
		l.Name, l.ExpiresAt = name, time.UnixMilli(until).UTC()
		return nil
	})
	return l, ok, err
}

// RenewLease extends a lease still held under its epoch; ErrConflict when it
// was lost (expired and taken, or released).
func (c Cluster) RenewLease(ctx context.Context, l LeaderLease, ttl time.Duration) (LeaderLease, error) {
	err := c.h.write(ctx, func(t *txn) error {
		until := ms(t.now.Add(ttl))
		res, err := t.exec(ctx, "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND epoch = ? AND expires_at > ?",
			until, l.Name, l.Holder, l.Epoch, ms(t.now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return conflict("lease %s is no longer held by %s at epoch %d", l.Name, l.Holder, l.Epoch)
		}
		l.ExpiresAt = time.UnixMilli(until).UTC()
		return nil
	})
	return l, err
}

// ReleaseLease gives a lease up at once (a clean shutdown), so another
// holder need not wait for it to expire.
func (c Cluster) ReleaseLease(ctx context.Context, l LeaderLease) error {
	return c.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND epoch = ?",
			ms(t.now), l.Name, l.Holder, l.Epoch)
		return err
	})
}

// Lease returns the named lease as it stands (ErrNotFound if never taken).
func (c Cluster) Lease(ctx context.Context, name string) (LeaderLease, error) {
	return readLease(ctx, c.h.reader(), name)
}

func readLease(ctx context.Context, q querier, name string) (LeaderLease, error) {
	l := LeaderLease{Name: name}
	var until sql.NullInt64
	err := q.queryRow(ctx, "SELECT holder, epoch, expires_at FROM leases WHERE name = ?", name).Scan(&l.Holder, &l.Epoch, &until)
	if isNoRows(err) {
		return l, notFound("lease %s was never taken", name)
	}
	l.ExpiresAt = fromMS(until)
	return l, err
}

// ClaimCronFire claims the fire of a cron schedule (key: the schedule's
// identity, e.g. repository, workflow, cron and timezone) at time at: true
// only if at is later than the last claimed fire. Run it in the transaction
// that creates the fired run (DB.Update), so a fire is claimed if and only
// if its run exists.
func (c Cluster) ClaimCronFire(ctx context.Context, key string, at time.Time) (bool, error) {
	var ok bool
	err := c.h.write(ctx, func(t *txn) error {
		var k string
		err := t.queryRow(ctx, `INSERT INTO cron_fires (key, last_fired_at) VALUES (?, ?)
			ON CONFLICT (key) DO UPDATE SET last_fired_at = excluded.last_fired_at
			WHERE cron_fires.last_fired_at < excluded.last_fired_at RETURNING key`, key, ms(at)).Scan(&k)
		ok = err == nil
		if isNoRows(err) {
			return nil
		}
		return err
	})
	return ok, err
}

// LastCronFire returns the last claimed fire time of a schedule (zero if
// none).
func (c Cluster) LastCronFire(ctx context.Context, key string) (time.Time, error) {
	var at sql.NullInt64
	err := c.h.reader().queryRow(ctx, "SELECT last_fired_at FROM cron_fires WHERE key = ?", key).Scan(&at)
	if isNoRows(err) {
		return time.Time{}, nil
	}
	return fromMS(at), err
}
