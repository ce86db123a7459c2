package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// Ingress keeps webhook deliveries: a dedup table of (source, delivery id)
// with a TTL, and the event log — one row per delivery received, duplicates
// included, with its body (so a delivery acknowledged 202 is processed after
// a crash, and reruns can read it) and its outcome.
type Ingress struct{ h handle }

// DefaultDeliveryClaim is how long a processor holds a delivery before
// another may take it over.
const DefaultDeliveryClaim = 5 * time.Minute

// bodyDedupPrefix keys a signed body's hash in delivery_dedup, beside the
// source's delivery ids.
const bodyDedupPrefix = "body:sha256:"

// NewDelivery is a webhook delivery to record.
type NewDelivery struct {
	Source     string
	DeliveryID string // the forge's delivery id; "" disables dedup
	// BodyHash, when set (the SHA-256 of a signed body, hex), is deduped
	// like a delivery id: a signed body replayed under a new delivery id
	// within the dedup TTL is a duplicate.
	BodyHash string
	Event    string
	Headers  map[string]string // the headers processing needs
	Body     []byte
	// Owner, when set, claims the new delivery for processing right away
	// (for ClaimFor, default DefaultDeliveryClaim).
	Owner    string
	ClaimFor time.Duration
}

// Delivery is a row of the event log.
type Delivery struct {
	ID          int64
	Source      string
	DeliveryID  string
	Event       string
	Headers     map[string]string
	Body        []byte // filled by Get and Claim, not by List
	Status      kiln.DeliveryStatus
	Message     string
	RunIDs      []string
	ReceivedAt  time.Time
	ProcessedAt time.Time
	Attempts    int
}

// Record stores a delivery. A delivery id seen from the same source within
// the dedup TTL is a duplicate: it gets an event-log row of its own with
// status duplicate (and no body), and duplicate is true. The dedup insert is
// atomic (INSERT … ON CONFLICT), so two coordinators receiving the same
// delivery at once record it once.
func (i Ingress) Record(ctx context.Context, d NewDelivery) (id int64, duplicate bool, err error) {
	if d.Source == "" {
		return 0, false, invalid("a delivery needs a source")
	}
	headers, err := json.Marshal(orEmpty(d.Headers))
	if err != nil {
		return 0, false, err
	}
	err = i.h.write(ctx, func(t *txn) error {
		duplicate = false
		now := ms(t.now)
		replay := false
		var keys []string
		if d.DeliveryID != "" {
			keys = append(keys, d.DeliveryID)
		}
		if d.BodyHash != "" { // B116
			keys = append(keys, bodyDedupPrefix+d.BodyHash)
		}
		if len(keys) > 0 {
			// The delivery id and the signed body's hash in one statement
			// (one round trip on the webhook's path to its 202): each
			// row is inserted, or renewed when expired; the rows returned
			// are the keys not seen within the TTL.
			fresh, err := t.dedup(ctx, d.Source, keys, ms(t.now.Add(t.db.cfg.DedupTTL)), now)
			if err != nil {
				return err
			}
			switch {
			case d.DeliveryID != "" && !fresh[d.DeliveryID]:
				duplicate = true
				if hk := bodyDedupPrefix + d.BodyHash; d.BodyHash != "" && fresh[hk] {
					// A duplicate id records no body hash: undo this
					// statement's (an expired row is as good as none).
					if _, err := t.exec(ctx, "UPDATE delivery_dedup SET expires_at = ? WHERE source = ? AND delivery_id = ?", now, d.Source, hk); err != nil {
						return fmt.Errorf("dedup: %w", err)
					}
				}
			case d.BodyHash != "" && !fresh[bodyDedupPrefix+d.BodyHash]:
				duplicate, replay = true, true
			}
		}
		status, message, body := kiln.DeliveryReceived, "", d.Body
		var owner, until, processed any
		attempts := 0
		if duplicate {
			status, message, body, processed = kiln.DeliveryDuplicate, "a delivery with this id was already received", nil, now
			if replay {
				message = "a delivery with this signed body was already received (a replay under a new delivery id)"
			}
		} else if d.Owner != "" {
			claim := d.ClaimFor
			if claim <= 0 {
				claim = DefaultDeliveryClaim
			}
			// Claimed at once: the recording server's processing is the
			// first attempt, so a takeover is the second (B134).
			owner, until, attempts = d.Owner, ms(t.now.Add(claim)), 1
		}
		return t.queryRow(ctx, `INSERT INTO deliveries (source, delivery_id, event, headers, body, status, message, received_at,
			processed_at, claimed_by, claim_until, attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			d.Source, d.DeliveryID, d.Event, string(headers), body, string(status), message, now,
			processed, owner, until, attempts).Scan(&id)
	})
	return id, duplicate, err
}

// Claim takes up to limit received deliveries that no live claim holds (a
// processor died after answering 202) for owner, for the lease duration. A
// processor finishes each with Finish, in the transaction that creates its
// runs, so a delivery is processed exactly once.
func (i Ingress) Claim(ctx context.Context, owner string, lease time.Duration, limit int) ([]Delivery, error) {
	if lease <= 0 {
		lease = DefaultDeliveryClaim
	}
	if limit <= 0 {
		limit = 10
	}
	var out []Delivery
	err := i.h.write(ctx, func(t *txn) error {
		lock := ""
		if t.db.dialect.name() == "postgres" {
			lock = " FOR UPDATE SKIP LOCKED"
		}
		now := ms(t.now)
		rows, err := t.query(ctx, `UPDATE deliveries SET claimed_by = ?, claim_until = ?, attempts = attempts + 1
			WHERE id IN (SELECT id FROM deliveries WHERE status = 'received' AND (claim_until IS NULL OR claim_until <= ?)
				ORDER BY id LIMIT ?`+lock+`)
			RETURNING `+deliveryCols+`, body`, owner, ms(t.now.Add(lease)), now, limit)
		if err != nil {
			return fmt.Errorf("claim deliveries: %w", err)
		}
		out, err = scanDeliveries(rows, true)
		return err
	})
	return out, err
}

// Finish records the outcome of a delivery claimed by owner. It is a
// conflict when the delivery is no longer received or owner no longer holds
// it (another processor took it over): the caller's transaction, with the
// runs it created, must then roll back.
func (i Ingress) Finish(ctx context.Context, id int64, owner string, status kiln.DeliveryStatus, message string, runIDs []string) error {
	if status == kiln.DeliveryReceived || status == "" {
		return invalid("finish a delivery with an outcome, not %q", status)
	}
	ids, err := json.Marshal(orEmptySlice(runIDs))
	if err != nil {
		return err
	}
	return i.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, `UPDATE deliveries SET status = ?, message = ?, run_ids = ?, processed_at = ?, claim_until = NULL
			WHERE id = ? AND status = 'received' AND claimed_by = ?`,
			string(status), message, string(ids), ms(t.now), id, owner)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return conflict("delivery %d is not held by %s (already processed or taken over)", id, owner)
		}
		return nil
	})
}

// Note adds a line to a finished delivery's message, unless the message
// has it already: what happened after its outcome (the check run of its
// lint errors that GitHub refused). Not a state transition.
func (i Ingress) Note(ctx context.Context, id int64, note string) error {
	return i.h.write(ctx, func(t *txn) error {
		var msg string
		err := t.queryRow(ctx, "SELECT message FROM deliveries WHERE id = ? AND status <> 'received'", id).Scan(&msg)
		if isNoRows(err) {
			return notFound("no finished delivery %d", id)
		}
		if err != nil || strings.Contains(msg, note) {
			return err
		}
		if msg != "" {
			msg += "\n"
		}
		_, err = t.exec(ctx, "UPDATE deliveries SET message = ? WHERE id = ?", msg+note, id)
		return err
	})
}

// Retry records why an attempt to process a delivery owner holds failed,
// as its message, and keeps it from every processor for wait: then the
// poll takes it up for its next attempt. It is a conflict when owner no
// longer holds the delivery.
func (i Ingress) Retry(ctx context.Context, id int64, owner, reason string, wait time.Duration) error {
	return i.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, `UPDATE deliveries SET message = ?, claim_until = ?
			WHERE id = ? AND status = 'received' AND claimed_by = ?`,
			reason, ms(t.now.Add(wait)), id, owner)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return conflict("delivery %d is not held by %s (already processed or taken over)", id, owner)
		}
		return nil
	})
}

// Release ends the claims on unfinished deliveries of every owner named
// prefix+"/…" but current, so the poll takes them up at once: a restarted
// server (the same prefix, a new current owner) does not wait out the
// claims it held when it stopped. It returns how many it released.
func (i Ingress) Release(ctx context.Context, prefix, current string) (int64, error) {
	prefix += "/"
	var n int64
	err := i.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, `UPDATE deliveries SET claim_until = NULL
			WHERE status = 'received' AND claim_until IS NOT NULL AND substr(claimed_by, 1, ?) = ? AND claimed_by <> ?`,
			len(prefix), prefix, current)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// Get returns one delivery with its body.
func (i Ingress) Get(ctx context.Context, id int64) (Delivery, error) {
	rows, err := i.h.reader().query(ctx, "SELECT "+deliveryCols+", body FROM deliveries WHERE id = ?", id)
	if err != nil {
		return Delivery{}, err
	}
	ds, err := scanDeliveries(rows, true)
	if err != nil {
		return Delivery{}, err
	}
	if len(ds) == 0 {
		return Delivery{}, notFound("delivery %d does not exist", id)
	}
	return ds[0], nil
}

// DeliveryFilter selects event-log rows. Zero fields do not filter.
type DeliveryFilter struct {
	Source string
	Status kiln.DeliveryStatus
	Before int64 // only rows with a smaller id (paging)
	Limit  int   // default 50, at most 1000
}

// List returns the event log newest first, without bodies.
func (i Ingress) List(ctx context.Context, f DeliveryFilter) ([]Delivery, error) {
	conds := []string{"1 = 1"}
	var args []any
	if f.Source != "" {
		conds, args = append(conds, "source = ?"), append(args, f.Source)
	}
	if f.Status != "" {
		conds, args = append(conds, "status = ?"), append(args, string(f.Status))
	}
	if f.Before > 0 {
		conds, args = append(conds, "id < ?"), append(args, f.Before)
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	args = append(args, min(f.Limit, 1000))
	rows, err := i.h.reader().query(ctx, "SELECT "+deliveryCols+" FROM deliveries WHERE "+strings.Join(conds, " AND ")+" ORDER BY id DESC LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return scanDeliveries(rows, false)
}

// Purge deletes expired dedup rows and event-log rows received before
// before (zero: keep the event log). It returns how many of each it deleted.
func (i Ingress) Purge(ctx context.Context, before time.Time) (dedup, events int64, err error) {
	err = i.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "DELETE FROM delivery_dedup WHERE expires_at <= ?", ms(t.now))
		if err != nil {
			return err
		}
		dedup, _ = res.RowsAffected()
		events = 0
		if before.IsZero() {
			return nil
		}
		res, err = t.exec(ctx, "DELETE FROM deliveries WHERE received_at < ? AND status <> 'received'", ms(before))
		if err != nil {
			return err
		}
		events, _ = res.RowsAffected()
		return nil
	})
	return dedup, events, err
}

const deliveryCols = `id, source, delivery_id, event, headers, status, message, run_ids, received_at, processed_at, attempts`

func scanDeliveries(rows *sql.Rows, withBody bool) ([]Delivery, error) {
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		var headers, runIDs string
		var received, processed sql.NullInt64
		dest := []any{&d.ID, &d.Source, &d.DeliveryID, &d.Event, &headers, &d.Status, &d.Message, &runIDs, &received, &processed, &d.Attempts}
		if withBody {
			dest = append(dest, &d.Body)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(headers), &d.Headers); err != nil {
			return nil, fmt.Errorf("delivery %d headers: %w", d.ID, err)
		}
		if err := json.Unmarshal([]byte(runIDs), &d.RunIDs); err != nil {
			return nil, fmt.Errorf("delivery %d run ids: %w", d.ID, err)
		}
		d.ReceivedAt, d.ProcessedAt = fromMS(received), fromMS(processed)
		out = append(out, d)
	}
	return out, rows.Err()
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func orEmptySlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// dedup inserts the keys of a delivery into delivery_dedup, renewing rows
// that expired, and reports which keys were fresh (inserted or renewed).
func (t *txn) dedup(ctx context.Context, source string, keys []string, expires, now int64) (map[string]bool, error) {
	values := make([]string, len(keys))
	args := make([]any, 0, 3*len(keys)+1)
	for i, k := range keys {
		values[i] = "(?, ?, ?)"
		args = append(args, source, k, expires)
	}
	args = append(args, now)
	rows, err := t.query(ctx, `INSERT INTO delivery_dedup (source, delivery_id, expires_at) VALUES `+strings.Join(values, ", ")+`
		ON CONFLICT (source, delivery_id) DO UPDATE SET expires_at = excluded.expires_at
		WHERE delivery_dedup.expires_at <= ? RETURNING delivery_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	defer rows.Close()
	fresh := make(map[string]bool, len(keys))
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		fresh[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	return fresh, nil
}
