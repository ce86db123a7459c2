package fleet

import (
	"context"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// ClaimInline is the engine's InlineClaimer: it claims, inside the
// transaction creating a run (tx), the oldest queued jobs its idle agents
// accept — a few idle agents, as the dispatcher's fast path would — so the
// run's commit is the claim's too, and the jobs go out as soon as it
// commits, with no dispatcher pass and no committer batch in between.
//
// Free slots are claimed by one claimer at a time: ClaimInline holds the
// dispatcher's claim lock from the claim until done, and gives up at once
// (nil) when a pass holds it — the wake-up after the commit then offers the
// jobs as before. An agent lost before done is given nothing: its claimed
// jobs are requeued (a compare-and-set on the lease, so a loss that
// already requeued them wins). Scalers' single-use agents are left to the
// dispatcher, which binds each to the job it was started for.
func (f *Fleet) ClaimInline(ctx context.Context, tx *store.Tx) (func(committed bool) ([]string, store.Effects), error) {
	if f.state.Load() != 1 {
		return nil, nil
	}
	d := f.disp
	if !d.claimMu.TryLock() {
		return nil, nil
	}
	var picks []pick
	for _, p := range d.idle(fastPathAgents) {
		if !p.a.oneJob {
			picks = append(picks, p)
		}
	}
	if len(picks) == 0 {
		d.claimMu.Unlock()
		return nil, nil
	}
	asks := make([]store.ClaimAsk, len(picks))
	for i, p := range picks {
		asks[i] = store.ClaimAsk{AgentID: p.a.id, Labels: p.a.labels, Slots: p.n}
	}
	started := f.now()
	got, err := tx.Queue().ClaimFor(ctx, asks)
	if err != nil {
		d.claimMu.Unlock()
		return nil, err
	}
	return func(committed bool) ([]string, store.Effects) {
		defer d.claimMu.Unlock()
		if !committed {
			return nil, store.Effects{}
		}
		return d.sendInline(picks, got, started)
	}, nil
}

// sendInline records the leases of an inline claim that committed and
// sends the jobs, each agent's on a goroutine of its own (the caller is a
// delivery's processing). It returns the jobs claimed and the runs the
// claim started. The jobs entered the queue in the claim's own
// transaction: their dispatch latency counts from the claim's start.
func (d *dispatcher) sendInline(picks []pick, got [][]store.Claimed, started time.Time) ([]string, store.Effects) {
	f := d.f
	took := f.now().Sub(started)
	var ids []string
	var eff store.Effects
	for i := range picks {
		p := &picks[i]
		for _, c := range got[i] {
			ids = append(ids, c.JobID)
			if c.RunStarted {
				eff.Runs = append(eff.Runs, store.RunChange{ID: c.RunID, Status: kiln.RunRunning})
			}
		}
		if len(got[i]) == 0 {
			continue
		}
		f.stats.claimLatency.observe(took)
		p.got = p.a.hold(got[i])
		if len(p.got) == 0 {
			d.requeueLost(got[i])
			continue
		}
		f.stats.claimedWithRun.Add(uint64(len(p.got)))
		d.mu.Lock()
		for _, c := range p.got {
			if len(d.wokeAt) < maxWokeAt {
				d.wokeAt[c.JobID] = started
			}
		}
		d.mu.Unlock()
		f.took(p.a, p.got)
		if !f.goSend(func() { d.deliverAll(context.Background(), p.a, p.got) }) {
			d.deliverAll(context.Background(), p.a, p.got)
		}
	}
	return ids, eff
}

// requeueLost puts back in the queue the jobs an inline claim gave an agent
// lost meanwhile: its loss may have committed before the claim did, and
// then nothing else would (until the ack timeout).
func (d *dispatcher) requeueLost(cs []store.Claimed) {
	for _, c := range cs {
		l := store.Lease{JobID: c.JobID, Epoch: c.Epoch}
		d.f.cm.async(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
			res, err := tx.Queue().Requeue(ctx, l, "the agent it was sent to was lost before it got it")
			return res.Effects, err
		})
	}
}
