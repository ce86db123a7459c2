// Package cluster is what coordinators sharing one database know of each
// other: each server process's row in the coordinators table (its
// heartbeat and advertise URL), leadership by a database lease, and the
// cross-server wake-up (PostgreSQL LISTEN/NOTIFY) that brings a job queued
// on one server to an idle agent on another.
//
// Leadership follows river's design: a named lease row whose epoch is the
// term's fencing token. A coordinator trusts its leadership only until
// attempt start + LeaseTTL − a safety margin (the trust window), so a
// paused leader stops acting before another can take the lease; the
// leader's writes are fenced besides (store.Cluster.Fence) in their
// transactions. On SQLite (Sole) the one process is the leader from start,
// without a lease.
package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

// Defaults for Config.
const (
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultDeadAfter         = 10 * time.Second
	// LeaderLease is the lease's name in the leases table.
	LeaderLease = "leader"
)

// Config configures a Cluster; zero fields take their defaults.
type Config struct {
	// AdvertiseURL is where agents reach this coordinator
	// (cluster.advertise_url, default public_url): listed in register.ack.
	AdvertiseURL string
	// HeartbeatInterval is how often the coordinator writes its row and
	// renews (or tries to take) the leader lease.
	HeartbeatInterval time.Duration
	// DeadAfter: a coordinator whose row is older is dead, and the leader
	// puts its agents' jobs into the recovery window. It is also the
	// leader lease's TTL.
	DeadAfter time.Duration
	// Sole says no other coordinator can share the database (SQLite): this
	// one leads from the start, and every other coordinator row is a dead
	// previous process.
	Sole   bool
	Clock  func() time.Time
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.DeadAfter = cmp.Or(c.DeadAfter, DefaultDeadAfter)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.HeartbeatInterval <= 0 || c.DeadAfter < 3*c.HeartbeatInterval {
		return fmt.Errorf("cluster: dead_after (%s) must be at least three heartbeat intervals (%s), or a live coordinator looks dead between two heartbeats",
			c.DeadAfter, c.HeartbeatInterval)
	}
	return nil
}

// Cluster is this coordinator's membership. Join writes its row; Run keeps
// it alive, holds or seeks the leader lease, and listens for wake-ups.
type Cluster struct {
	db  *store.DB
	cfg Config
	id  string
	log *slog.Logger

	mu           sync.Mutex
	lease        store.LeaderLease
	trustedUntil time.Time
	live         []store.Coordinator // as of the last heartbeat
	beatAt       time.Time           // the last heartbeat written

	wakes   chan []string // wake-ups from other coordinators; nil slice: redrive
	publish chan []string
}

// New returns this process's membership under a fresh random id.
func New(db *store.DB, cfg Config) (*Cluster, error) {
	if db == nil {
		return nil, errors.New("cluster: a store is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Cluster{db: db, cfg: cfg, id: "c-" + hex.EncodeToString(b[:]), log: cfg.Logger,
		wakes: make(chan []string, wakeBuffer), publish: make(chan []string, wakeBuffer)}, nil
}

// ID is this coordinator's id (the agents it serves are recorded under it).
func (c *Cluster) ID() string { return c.id }

// DeadAfter is how long a silent coordinator counts as alive.
func (c *Cluster) DeadAfter() time.Duration { return c.cfg.DeadAfter }

// Sole reports whether this is the only coordinator the database can have.
func (c *Cluster) Sole() bool { return c.cfg.Sole }

// Join writes this coordinator's row, before it serves anyone: a
// registration recorded under its id must never look orphaned.
func (c *Cluster) Join(ctx context.Context) error {
	started := c.cfg.Clock()
	if err := c.db.Cluster().Beat(ctx, c.id, c.cfg.AdvertiseURL); err != nil {
		return fmt.Errorf("cluster: record this coordinator: %w", err)
	}
	c.mu.Lock()
	c.beatAt = started
	c.mu.Unlock()
	c.refresh(ctx)
	return nil
}

// Leading returns the leader lease and true while this coordinator may act
// as the leader: always on a sole coordinator (then the lease is zero and
// nothing is fenced), else until the trust window of its last successful
// acquisition or renewal ends.
func (c *Cluster) Leading() (store.LeaderLease, bool) {
	if c.cfg.Sole {
		return store.LeaderLease{}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease.Epoch == 0 || !c.cfg.Clock().Before(c.trustedUntil) {
		return store.LeaderLease{}, false
	}
	return c.lease, true
}

// Isolated reports that this coordinator's last recorded heartbeat is so
// old (dead_after less two heartbeats) that the leader may soon count it
// dead; never on a sole coordinator.
func (c *Cluster) Isolated() bool {
	if c.cfg.Sole {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.beatAt.IsZero() && c.cfg.Clock().Sub(c.beatAt) > c.cfg.DeadAfter-2*c.cfg.HeartbeatInterval
}

// Coordinators returns the advertise URLs of the live coordinators, this
// one first.
func (c *Cluster) Coordinators() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []string{}
	if c.cfg.AdvertiseURL != "" {
		out = append(out, c.cfg.AdvertiseURL)
	}
	cutoff := c.cfg.Clock().Add(-c.cfg.DeadAfter)
	for _, k := range c.live {
		if k.ID != c.id && k.AdvertiseURL != "" && k.HeartbeatAt.After(cutoff) {
			out = append(out, k.AdvertiseURL)
		}
	}
	return out
}

// Run keeps the membership until ctx ends: a heartbeat every
// HeartbeatInterval (row, leader lease), the wake-up listener and
// publisher. On the way out it gives the lease up and deletes its row, so
// another coordinator takes over at once.
func (c *Cluster) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { c.listen(ctx) })
	wg.Go(func() { c.publishLoop(ctx) })
	defer wg.Wait()
	c.beat(ctx)
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.leave()
			return nil
		case <-t.C:
			c.beat(ctx)
		}
	}
}

func (c *Cluster) beat(ctx context.Context) {
	started := c.cfg.Clock()
	if err := c.db.Cluster().Beat(ctx, c.id, c.cfg.AdvertiseURL); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cluster: heartbeat failed", "err", err)
		}
	} else {
		c.mu.Lock()
		c.beatAt = started
		c.mu.Unlock()
	}
	c.refresh(ctx)
	if !c.cfg.Sole {
		c.lead(ctx)
	}
}

func (c *Cluster) refresh(ctx context.Context) {
	live, err := c.db.Cluster().Coordinators(ctx)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.live = live
	c.mu.Unlock()
}

// lead renews the lease this coordinator holds, or tries to take it. The
// trust window starts when the attempt started, not when it answered.
func (c *Cluster) lead(ctx context.Context) {
	started := c.cfg.Clock()
	ttl := c.cfg.DeadAfter
	c.mu.Lock()
	held := c.lease
	c.mu.Unlock()
	var l store.LeaderLease
	var err error
	ok := false
	if held.Epoch != 0 {
		l, err = c.db.Cluster().RenewLease(ctx, held, ttl)
		ok = err == nil
	}
	if !ok {
		l, ok, err = c.db.Cluster().AcquireLease(ctx, LeaderLease, c.id, ttl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && ok:
		if c.lease.Epoch != l.Epoch {
			c.log.Info("cluster: this coordinator leads", "coordinator", c.id, "epoch", l.Epoch)
		}
		c.lease = l
		c.trustedUntil = started.Add(ttl - ttl/4)
	case c.lease.Epoch != 0 && !started.Before(c.trustedUntil):
		c.log.Info("cluster: leadership lost", "coordinator", c.id, "epoch", c.lease.Epoch, "err", err)
		c.lease = store.LeaderLease{}
	}
}

func (c *Cluster) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.mu.Lock()
	l := c.lease
	c.lease = store.LeaderLease{}
	c.mu.Unlock()
	if l.Epoch != 0 {
		_ = c.db.Cluster().ReleaseLease(ctx, l)
	}
	if err := c.db.Cluster().Leave(ctx, c.id); err != nil {
		c.log.Warn("cluster: deleting this coordinator's row failed; the leader will find it dead", "err", err)
	}
}
