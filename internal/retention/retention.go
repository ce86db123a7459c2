// Package retention is kiln's garbage collector: on the cluster's leader
// only, it deletes finished runs (with their jobs, logs and artifacts),
// artifacts, caches and the webhook event log once they are older than
// their retention.* TTL, a bounded batch of each per pass. On every
// server, a local pass removes the server's own log files of runs the
// leader purged and, with shared storage, of finished runs whose logs were
// shipped there (local.go). See docs/storage.md#retention.
package retention

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/artifacts"
	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/store"
)

// Config is retention.* plus how the collector runs. A TTL of 0 keeps
// that kind forever.
type Config struct {
	Runs       time.Duration // finished runs, from their end
	Artifacts  time.Duration // artifacts, from their upload
	Caches     time.Duration // caches, from their last save or restore
	Deliveries time.Duration // the webhook event log, from receipt
	// Interval between passes (default 1 min); Batch bounds what one pass
	// deletes of each kind (default 100), and how many of this server's
	// run log directories a local pass looks at.
	Interval time.Duration
	Batch    int
	// LocalGrace is how long after a run finished the local pass may
	// remove this server's copy of its shipped logs (default 10 min).
	LocalGrace time.Duration
	Clock      func() time.Time
	Logger     *slog.Logger
	Hooks      Hooks
}

// Hooks feed the metrics; nil fields are skipped.
type Hooks struct {
	Deleted func(kind string, n int) // runs, artifacts, caches, deliveries, dedup, uploads, local_logs
	Pass    func(took time.Duration, err error)
}

// Kinds of Hooks.Deleted.
const (
	KindRuns       = "runs"
	KindArtifacts  = "artifacts"
	KindCaches     = "caches"
	KindDeliveries = "deliveries"
	KindDedup      = "dedup"
	KindUploads    = "uploads"
	// KindLocalLogs counts the run log directories a server's local pass
	// removed from its own data directory.
	KindLocalLogs = "local_logs"
)

// abandonedUploads is when an upload record is dropped: its server died
// without ending it (a live upload ends or times out well before).
const abandonedUploads = time.Hour

// PurgedRunsKept is how long the record of a purged run stays, for the
// servers' local passes to remove their files of it: a server down for
// longer keeps them (docs/storage.md#retention).
const PurgedRunsKept = 30 * 24 * time.Hour

// DefaultLocalGrace is Config.LocalGrace's default.
const DefaultLocalGrace = 10 * time.Minute

// Leader reports whether this server leads the cluster (cluster.Cluster).
type Leader interface {
	Leading() (store.LeaderLease, bool)
}

// Blobs is the part of the storage backend the collector deletes from.
type Blobs interface {
	List(ctx context.Context, prefix, after string, limit int) ([]storage.Object, bool, error)
	Delete(ctx context.Context, key string) error
}

// Logs are the step logs (logstore.Store): RemoveRun deletes a purged
// run's, archived segments included; the rest is this server's own log
// directory, for the local pass.
type Logs interface {
	RemoveRun(ctx context.Context, runID string) error
	LocalRuns(after string, limit int) ([]string, error)
	RemoveLocalRun(runID string) error
	RemoveShipped(ctx context.Context, runID string) (kept int, err error)
	Shared() bool
}

// CacheRemover deletes a cache's row and body (caches.Service).
type CacheRemover interface {
	Remove(ctx context.Context, c store.Cache) error
}

// Collector is the garbage collector.
type Collector struct {
	db     *store.DB
	blobs  Blobs
	logs   Logs
	caches CacheRemover
	leader Leader
	cfg    Config

	localMu sync.Mutex
	cursor  string // the last run directory the local pass looked at
}

// New returns a Collector.
func New(db *store.DB, blobs Blobs, logs Logs, caches CacheRemover, leader Leader, cfg Config) (*Collector, error) {
	if db == nil || blobs == nil || logs == nil || caches == nil || leader == nil {
		return nil, errors.New("retention: a database, storage, logs, caches and a leader are required")
	}
	if cfg.Runs < 0 || cfg.Artifacts < 0 || cfg.Caches < 0 || cfg.Deliveries < 0 {
		return nil, errors.New("retention: a TTL must not be negative")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.LocalGrace <= 0 {
		cfg.LocalGrace = DefaultLocalGrace
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Collector{db: db, blobs: blobs, logs: logs, caches: caches, leader: leader, cfg: cfg}, nil
}

// Run makes a local pass every Interval, and a pass while this server
// leads, until ctx ends.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := c.LocalPass(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("retention: a pass over this server's own log files failed; the next one goes on", "err", err)
		}
		if _, leading := c.leader.Leading(); !leading {
			continue
		}
		start := time.Now()
		_, err := c.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("retention: a pass failed; the next one goes on", "err", err)
		}
		if c.cfg.Hooks.Pass != nil {
			c.cfg.Hooks.Pass(time.Since(start), err)
		}
	}
}

// Stats is what one pass deleted, by kind.
type Stats map[string]int

// Pass deletes at most Batch of each kind past its TTL.
func (c *Collector) Pass(ctx context.Context) (Stats, error) {
	now := c.cfg.Clock()
	st := Stats{}
	var errs []error
	if c.cfg.Runs > 0 {
		errs = append(errs, c.runs(ctx, now.Add(-c.cfg.Runs), st))
	}
	if c.cfg.Artifacts > 0 {
		errs = append(errs, c.artifacts(ctx, now.Add(-c.cfg.Artifacts), st))
	}
	if c.cfg.Caches > 0 {
		errs = append(errs, c.cachesPass(ctx, now.Add(-c.cfg.Caches), st))
	}
	if c.cfg.Deliveries > 0 {
		dedup, events, err := c.db.Retention().PurgeDeliveries(ctx, now.Add(-c.cfg.Deliveries), c.cfg.Batch)
		st[KindDedup], st[KindDeliveries] = int(dedup), int(events)
		errs = append(errs, err)
	}
	n, err := c.db.Uploads().Abandoned(ctx, now.Add(-abandonedUploads))
	st[KindUploads] = int(n)
	errs = append(errs, err)
	// The records of purged runs, once every server had the time to
	// remove its files of them (not counted: they are bookkeeping).
	_, err = c.db.Retention().ForgetPurged(ctx, now.Add(-PurgedRunsKept), c.cfg.Batch)
	errs = append(errs, err)
	for kind, n := range st {
		if n > 0 {
			c.cfg.Logger.Info("retention: deleted", "kind", kind, "count", n)
			if c.cfg.Hooks.Deleted != nil {
				c.cfg.Hooks.Deleted(kind, n)
			}
		}
	}
	return st, errors.Join(errs...)
}

// runs deletes expired runs: their objects first (a failure leaves the
// run for the next pass to try again), then their rows.
func (c *Collector) runs(ctx context.Context, cutoff time.Time, st Stats) error {
	ids, err := c.db.Retention().ExpiredRuns(ctx, cutoff, c.cfg.Batch)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := c.deletePrefix(ctx, artifacts.RunPrefix(id)); err != nil {
			return err
		}
		if err := c.logs.RemoveRun(ctx, id); err != nil {
			return err
		}
		deleted, err := c.db.Retention().DeleteRun(ctx, id)
		if err != nil {
			return err
		}
		if deleted {
			st[KindRuns]++
		}
	}
	return nil
}

func (c *Collector) deletePrefix(ctx context.Context, prefix string) error {
	for {
		objs, _, err := c.blobs.List(ctx, prefix, "", 1000)
		if err != nil || len(objs) == 0 {
			return err
		}
		for _, o := range objs {
			if err := c.blobs.Delete(ctx, o.Key); err != nil {
				return err
			}
		}
	}
}

func (c *Collector) artifacts(ctx context.Context, cutoff time.Time, st Stats) error {
	arts, err := c.db.Retention().ExpiredArtifacts(ctx, cutoff, c.cfg.Batch)
	if err != nil {
		return err
	}
	for _, a := range arts {
		// The row first: a listed artifact is one people can download.
		if err := c.db.Retention().DeleteArtifact(ctx, a); err != nil {
			return err
		}
		if err := c.blobs.Delete(ctx, a.StorageKey); err != nil {
			return err
		}
		st[KindArtifacts]++
	}
	return nil
}

func (c *Collector) cachesPass(ctx context.Context, cutoff time.Time, st Stats) error {
	old, err := c.db.Caches().Unused(ctx, cutoff, c.cfg.Batch)
	if err != nil {
		return err
	}
	for _, cc := range old {
		if err := c.caches.Remove(ctx, cc); err != nil {
			return err
		}
		st[KindCaches]++
	}
	return nil
}
