package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// Cluster is what the fleet needs of the coordinators sharing its database
// (the server gives it cluster.Cluster). Without one the fleet is the only
// coordinator there can be, under an id of its own.
type Cluster interface {
	// ID is this coordinator's id: agents connected here are recorded
	// under it.
	ID() string
	// Sole: no other coordinator can share the database (SQLite).
	Sole() bool
	// DeadAfter is how long a silent coordinator counts as alive.
	DeadAfter() time.Duration
	// Leading says whether this coordinator runs the leader's work (the
	// sweeps, the recovery of dead coordinators' agents) and the lease that
	// fences those writes (zero on a sole coordinator: nothing to fence).
	Leading() (store.LeaderLease, bool)
	// Coordinators are the live coordinators' advertise URLs, for
	// register.ack.
	Coordinators() []string
	// Publish tells the other coordinators jobs were queued; Wakes
	// delivers theirs (empty: offer the whole queue again).
	Publish(jobIDs []string)
	Wakes() <-chan []string
	// Isolated says this coordinator could not record that it is alive
	// for so long that the leader may count it dead: it must stop serving
	// its agents, which then reconnect to another.
	Isolated() bool
}

// solo is the Cluster of a fleet that is alone: it always leads, and a
// previous process's agents are orphans at its start.
type solo struct{ id string }

func newSolo() solo {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return solo{id: "solo-" + hex.EncodeToString(b[:])}
}

func (s solo) ID() string                       { return s.id }
func (solo) Sole() bool                         { return true }
func (solo) DeadAfter() time.Duration           { return time.Minute }
func (solo) Leading() (store.LeaderLease, bool) { return store.LeaderLease{}, true }
func (solo) Coordinators() []string             { return nil }
func (solo) Publish([]string)                   {}
func (solo) Wakes() <-chan []string             { return nil }
func (solo) Isolated() bool                     { return false }

// fence makes a leader-only write fail (store.ErrConflict) unless the
// leader lease is still held under l's epoch; a sole coordinator has no
// lease to check.
func fence(ctx context.Context, tx *store.Tx, l store.LeaderLease) error {
	if l.Epoch == 0 {
		return nil
	}
	return tx.Cluster().Fence(ctx, l)
}

// recoverOrphans is the leader's recovery of agents the database lists as
// connected to a coordinator that is not alive — one that died, was
// SIGKILLed, restarted (a new process is a new coordinator), or stopped
// cleanly and left its agents' jobs as they were (B141, B142). Each such
// agent's jobs enter the recovery window, unstarted ones included (the
// agent may be alive and reconnect elsewhere, listing them); the agent is
// recorded as disconnected. An agent that registered elsewhere meanwhile is
// no longer an orphan: its row names its new coordinator, and the row is
// locked while this runs. Dead coordinators' rows are deleted afterwards.
func (f *Fleet) recoverOrphans(ctx context.Context, l store.LeaderLease) error {
	var orphans []store.OrphanRef
	err := f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		orphans = nil
		if err := fence(ctx, tx, l); err != nil {
			return store.Effects{}, err
		}
		var err error
		if orphans, err = tx.Auth().OrphanedAgents(ctx, f.cl.ID(), f.liveSince(tx.Now())); err != nil {
			return store.Effects{}, err
		}
		var eff store.Effects
		for _, o := range orphans {
			held, err := tx.Auth().ReleaseAgent(ctx, o.AgentID, o.Coordinator)
			if err != nil || !held {
				return store.Effects{}, err
			}
			res, err := tx.Queue().AgentLost(ctx, o.AgentID)
			if err != nil {
				return store.Effects{}, err
			}
			mergeEffects(&eff, res.Effects)
			// The agent may have heard from its coordinator until it died,
			// and runs its jobs for its lease after that (B126, B127).
			if len(res.Jobs) > 0 {
				if err := tx.Queue().HoldRecovery(ctx, o.AgentID, tx.Now().Add(f.cfg.DropAfter+f.cfg.RecoveryWindow)); err != nil {
					return store.Effects{}, err
				}
			}
		}
		return eff, tx.Cluster().Prune(ctx, f.liveSince(tx.Now()))
	})
	if errors.Is(err, store.ErrConflict) {
		return nil // no longer the leader
	}
	if err != nil {
		return fmt.Errorf("recover the agents of dead coordinators: %w", err)
	}
	for _, o := range orphans {
		f.log.Info("agent of a dead coordinator: its jobs enter the recovery window", "agent_id", o.AgentID, "coordinator", o.Coordinator)
	}
	return nil
}

// liveSince is the oldest heartbeat of a live coordinator; on a sole
// coordinator every other one is dead, however recent its row.
func (f *Fleet) liveSince(now time.Time) time.Time {
	if f.cl.Sole() {
		return now.Add(time.Hour)
	}
	return now.Add(-f.cl.DeadAfter())
}

// leaveIfIsolated closes every connection (going away: the agents
// reconnect to another coordinator and keep their jobs) while this
// coordinator cannot record that it is alive: the leader is about to count
// it dead and hand its agents' jobs to recovery, and an agent that still
// heard from it would keep running them past their recovery.
func (f *Fleet) leaveIfIsolated() {
	if !f.cl.Isolated() {
		return
	}
	conns := f.reg.allConns()
	if len(conns) > 0 {
		f.log.Warn("fleet: this coordinator cannot record that it is alive; closing its agents' connections so they move to another", "agents", len(conns))
	}
	for _, c := range conns {
		f.disconnect(c, closeCause{kind: "isolated", code: proto.CloseGoingAway,
			reason: "this coordinator lost its database", keepUnstarted: true, noStore: true})
	}
}

// pushCoordinators tells every registered agent whose list differs from
// the live coordinators now (B139): register.ack gave it the list of its
// time, and a server that started since, or died, would otherwise stay
// unknown to it until it registers again — too late to fail over to the
// new one when its own dies. The frames are written off the monitor's
// goroutine (a stuck agent must not hold up the sweeps), in order per
// agent, each with the newest list. A sole coordinator has no other to
// tell of.
func (f *Fleet) pushCoordinators() {
	if f.cl.Sole() {
		return
	}
	list := f.cl.Coordinators()
	told := 0
	for _, a := range f.reg.list() {
		if !a.live.Load() || a.lost.Load() {
			continue
		}
		a.mu.Lock()
		same := slices.Equal(a.coordinators, list)
		if !same {
			a.coordinators = list
		}
		a.mu.Unlock()
		if same {
			continue
		}
		told++
		f.goSend(func() {
			a.pushMu.Lock()
			defer a.pushMu.Unlock()
			a.mu.Lock()
			want := a.coordinators
			a.mu.Unlock()
			if slices.Equal(want, a.sentCoordinators) {
				return
			}
			if err := a.c.send(&proto.Coordinators{Coordinators: want}); err == nil {
				a.sentCoordinators = want
			}
		})
	}
	if told > 0 {
		f.log.Info("fleet: the live coordinators changed; telling the agents", "coordinators", list, "agents", told)
	}
}

// dropHeldElsewhere ends, without touching the store, this coordinator's
// connections of agents the database says registered on another
// coordinator since (a half-open connection here, a reconnect there): the
// other coordinator holds the agent and its jobs now.
func (f *Fleet) dropHeldElsewhere(ctx context.Context) {
	if f.cl.Sole() {
		return
	}
	as := f.reg.list()
	if len(as) == 0 {
		return
	}
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.id
	}
	asked := f.now()
	moved, err := f.db.Auth().HeldElsewhere(ctx, f.cl.ID(), ids)
	if err != nil {
		f.log.Warn("fleet: checking which agents moved to another coordinator failed", "err", err)
		return
	}
	for _, id := range moved {
		// A connection made since the question is the agent's newest.
		if a := f.reg.get(id); a != nil && a.connectedAt.Before(asked) {
			f.disconnect(a.c, causeMoved())
		}
	}
}
