package fleet

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// The dispatcher turns wake-ups into claims. Two things wake it: jobs
// entering the queue (Wake, with how many) and agents with free slots
// (registration, a job's end, agent.status). It coalesces them, so a burst
// of wake-ups costs one pass.
//
// A freed agent claims directly: the store's Claim gives it the oldest
// queued jobs it accepts, so every wake reason shares one FIFO order. New
// jobs are routed by queue key: the dispatcher reads the distinct queued
// keys, gives each key idle agents that accept it — enough free slots for
// the jobs that arrived — and claims for them in one transaction, in
// rounds until the keys are drained or no accepting agent is idle. The keys
// still waiting then get their pending reason.
type dispatcher struct {
	f    *Fleet
	wake chan struct{}
	// claimMu is held by whoever claims agents' free slots: a pass, or an
	// inline claim from the claim in a run's transaction until its commit
	// (ClaimInline). Slots are counted before a claim and taken only once
	// it committed, so two claimers at once could overfill an agent.
	claimMu sync.Mutex

	mu      sync.Mutex
	freed   map[*agent]struct{}
	bound   map[*agent]string // scalers' agents and the job each was started for
	hint    int               // jobs that entered the queue since the last pass
	full    bool              // redrive: offer the queue to every idle agent
	reasons bool              // the set of agents changed: recompute pending reasons
	wokeAt  map[string]time.Time

	// lastReason is the pending reason last written per key; only the
	// dispatcher's goroutine touches it.
	lastReason map[string]string
	// retries counts the passes in a row retried because a claim came up
	// short while jobs it accepts stayed queued (retryShort).
	retries int
}

// maxRounds bounds one routing pass; a longer one continues in the next.
const maxRounds = 32

// maxWokeAt bounds the wake times kept for the dispatch latency statistic.
const maxWokeAt = 100_000

func newDispatcher(f *Fleet) *dispatcher {
	return &dispatcher{f: f, wake: make(chan struct{}, 1), freed: map[*agent]struct{}{},
		bound: map[*agent]string{}, wokeAt: map[string]time.Time{}, lastReason: map[string]string{}}
}

func (d *dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// jobsQueued is Wake.
func (d *dispatcher) jobsQueued(jobs []store.JobRef) {
	now := d.f.now()
	d.mu.Lock()
	d.hint += len(jobs)
	for _, j := range jobs {
		if len(d.wokeAt) < maxWokeAt {
			d.wokeAt[j.ID] = now
		}
	}
	d.mu.Unlock()
	d.signal()
}

func (d *dispatcher) agentFree(a *agent) {
	d.mu.Lock()
	d.freed[a] = struct{}{}
	d.mu.Unlock()
	d.signal()
}

func (d *dispatcher) refreshReasons() {
	d.mu.Lock()
	d.reasons = true
	d.mu.Unlock()
	d.signal()
}

func (d *dispatcher) redrive() {
	d.mu.Lock()
	d.full = true
	d.mu.Unlock()
	d.signal()
}

// pruneWokeAt forgets wake times older than age (jobs another coordinator
// took, or that were cancelled while queued).
func (d *dispatcher) pruneWokeAt(now time.Time, age time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, t := range d.wokeAt {
		if now.Sub(t) > age {
			delete(d.wokeAt, id)
		}
	}
}

func (d *dispatcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		}
		d.claimMu.Lock()
		d.pass(ctx)
		d.claimMu.Unlock()
	}
}

func (d *dispatcher) pass(ctx context.Context) {
	d.mu.Lock()
	freed, hint, full, reasons, bound := d.freed, d.hint, d.full, d.reasons, d.bound
	d.freed, d.hint, d.full, d.reasons = map[*agent]struct{}{}, 0, false, false
	if len(bound) > 0 {
		d.bound = map[*agent]string{}
	} else {
		// Kept (not reallocated) for the next bind: never read it
		// outside the lock.
		bound = nil
	}
	d.mu.Unlock()
	for a, job := range bound {
		if !d.claimBound(ctx, a, job) {
			freed[a] = struct{}{}
		}
	}
	if len(freed) > 0 {
		picks := make([]pick, 0, len(freed))
		for a := range freed {
			if n := a.freeSlots(); n > 0 {
				picks = append(picks, pick{a: a, n: n})
			}
		}
		sort.Slice(picks, func(i, j int) bool { return picks[i].a.id < picks[j].a.id })
		d.claim(ctx, picks)
	}
	if hint > 0 || full || reasons {
		done, short := d.route(ctx, hint, full)
		d.retryShort(ctx, short)
		if !done {
			// A pass cut short continues at once.
			d.mu.Lock()
			d.full = true
			d.mu.Unlock()
			d.signal()
		}
	}
}

// pick is a claim for one agent and, once committed, what it got.
type pick struct {
	a   *agent
	n   int
	got []store.Claimed
}

// route offers the queued keys to idle agents and refreshes the pending
// reasons of the keys still waiting. It reports false
// when it stopped before the queue was drained or every accepting agent was
// busy.
func (d *dispatcher) route(ctx context.Context, hint int, full bool) (done, short bool) {
	f := d.f
	// A few jobs and a few idle agents (the common case of a webhook):
	// every idle agent claims at once, without reading the queued keys
	// first — the claim reads them itself — so the dispatch is one
	// transaction after the wake-up. The keys are read afterwards, for
	// the pending reasons and whatever is left.
	var fast []pick
	if !full && hint > 0 {
		fast = d.idle(max(hint, fastPathAgents))
		d.claim(ctx, fast)
	}
	keys, err := f.db.Queue().Keys(ctx)
	if err != nil {
		if ctx.Err() == nil { // a stop is no failure to report
			f.log.Error("fleet: reading the queue failed; the redrive will retry", "err", err)
		}
		return true, false
	}
	live := make(map[string]bool, len(keys))
	for _, k := range keys {
		live[k] = true
	}
	for _, p := range fast {
		if len(p.got) < p.n {
			short = true
			for k := range live {
				if p.a.labels.Accepts(store.KeyRequirement(k)) {
					delete(live, k)
				}
			}
		}
	}
	budget := hint
	if full {
		budget = math.MaxInt
	}
	done = true
	for round := 0; len(live) > 0; round++ {
		if round == maxRounds {
			done = false
			break
		}
		picks := d.allot(live, budget)
		if len(picks) == 0 {
			break
		}
		claimed := d.claim(ctx, picks)
		budget = max(budget-claimed, 0)
		for _, p := range picks {
			if len(p.got) < p.n { // the agent took all it accepts: those keys are drained
				short = true
				for k := range live {
					if p.a.labels.Accepts(store.KeyRequirement(k)) {
						delete(live, k)
					}
				}
			}
		}
		if claimed == 0 {
			break
		}
	}
	d.explain(ctx, keys, live, hint > 0 || full)
	return done, short
}

// maxShortRetries bounds the passes retried in a row by retryShort.
const maxShortRetries = 5

// retryShortAfter is the wait before the n-th retry of a pass whose claim
// came up short (retryShort): 2, 4, 8, 16, 32 ms. The rows it skipped are
// usually held by a transaction that commits within milliseconds.
func retryShortAfter(n int) time.Duration {
	return (2 * time.Millisecond) << min(max(n-1, 0), 4)
}

// retryShort handles a claim that came up short although jobs it accepts
// may still be queued: a claim skips the rows another transaction holds
// (SKIP LOCKED), such as another coordinator's claim or the engine moving
// a job, and no wake-up follows. If an idle agent
// accepts a key still queued, the pass runs again shortly (a few times,
// backing off), instead of leaving the job to the redrive.
func (d *dispatcher) retryShort(ctx context.Context, short bool) {
	if !short || d.retries >= maxShortRetries {
		d.retries = 0
		return
	}
	// Not cut short by the fleet's stop: a read interrupted by a cancel
	// leaves the driver closing its connection in the background.
	keys, err := d.f.db.Queue().Keys(context.WithoutCancel(ctx))
	if err != nil {
		return
	}
	for _, k := range keys {
		for _, a := range d.f.reg.matching(k) {
			if a.freeSlots() > 0 {
				d.retries++
				time.AfterFunc(retryShortAfter(d.retries), func() {
					d.mu.Lock()
					d.hint++
					d.mu.Unlock()
					d.signal()
				})
				return
			}
		}
	}
	d.retries = 0
}

// fastPathAgents is how many idle agents a wake-up for a few jobs offers
// them to without routing by key first.
const fastPathAgents = 4

// idle returns the agents with free slots, if there are at most n of them.
func (d *dispatcher) idle(n int) []pick {
	var picks []pick
	for _, a := range d.f.reg.list() {
		if free := a.freeSlots(); free > 0 {
			if len(picks) == n {
				return nil
			}
			picks = append(picks, pick{a: a, n: free})
		}
	}
	return picks
}

// allot gives each live key idle agents accepting it: at least one, and
// enough free slots for budget jobs. An agent is given to one key per round
// (its claim takes the oldest jobs of every key it accepts).
func (d *dispatcher) allot(live map[string]bool, budget int) []pick {
	keys := make([]string, 0, len(live))
	for k := range live {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	used := map[*agent]bool{}
	var picks []pick
	for _, k := range keys {
		want := max(budget, 1)
		got := 0
		for _, a := range d.f.reg.matching(k) {
			if got >= want {
				break
			}
			if used[a] {
				continue
			}
			if n := a.freeSlots(); n > 0 {
				used[a] = true
				picks = append(picks, pick{a: a, n: n})
				got += n
			}
		}
	}
	return picks
}

// maxClaimAgents bounds the agents one claim transaction serves: a wave
// of a thousand idle agents is claimed in transactions of this many, so
// each commits in milliseconds, the first agents get their jobs without
// waiting for the last, and the committer interleaves the successes that
// free agents again.
const maxClaimAgents = 32

// claim claims for the picks, maxClaimAgents per transaction, and sends
// what they got. It returns how many jobs were claimed.
func (d *dispatcher) claim(ctx context.Context, picks []pick) int {
	n := 0
	for len(picks) > maxClaimAgents {
		n += d.claimBatch(ctx, picks[:maxClaimAgents])
		picks = picks[maxClaimAgents:]
	}
	return n + d.claimBatch(ctx, picks)
}

// claimBatch claims for the picks in one transaction and sends what they
// got.
func (d *dispatcher) claimBatch(ctx context.Context, picks []pick) int {
	if len(picks) == 0 {
		return 0
	}
	started := d.f.now()
	err := d.f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		// One call for all the picks: agents accepting the same work share
		// a statement. An agent being lost asks for nothing.
		asks := make([]store.ClaimAsk, len(picks))
		for i := range picks {
			picks[i].got = nil
			if !picks[i].a.lost.Load() {
				asks[i] = store.ClaimAsk{AgentID: picks[i].a.id, Labels: picks[i].a.labels, Slots: picks[i].n}
			}
		}
		got, err := tx.Queue().ClaimFor(ctx, asks)
		if err != nil {
			return store.Effects{}, err
		}
		var eff store.Effects
		for i := range picks {
			picks[i].got = got[i]
			for _, c := range got[i] {
				if c.RunStarted {
					eff.Runs = append(eff.Runs, store.RunChange{ID: c.RunID, Status: kiln.RunRunning})
				}
			}
		}
		return eff, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			d.f.log.Error("fleet: claiming jobs failed; the redrive will retry", "err", err)
		}
		return 0
	}
	took := d.f.now().Sub(started)
	for range picks {
		d.f.stats.claimLatency.observe(took)
	}
	// The leases are recorded now, so the next round sees the slots taken;
	// each agent's dispatches are then written by a goroutine of their
	// own, so an agent slow to read (up to WriteTimeout) delays no other. A
	// lone agent's are written here, which is quicker.
	n, busy := 0, 0
	for i := range picks {
		p := &picks[i]
		p.got = p.a.hold(p.got)
		n += len(p.got)
		if len(p.got) > 0 {
			busy++
			d.f.took(p.a, p.got)
		}
	}
	for _, p := range picks {
		if len(p.got) == 0 {
			continue
		}
		if busy == 1 {
			d.deliverAll(ctx, p.a, p.got)
			continue
		}
		if !d.f.goSend(func() { d.deliverAll(ctx, p.a, p.got) }) {
			d.deliverAll(ctx, p.a, p.got)
		}
	}
	return n
}

// hold records the leases of claimed jobs in the agent's slots and returns
// those it recorded: none for an agent being lost, whose loss, committed
// after the claim, covers them.
func (a *agent) hold(cs []store.Claimed) []store.Claimed {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lost.Load() {
		return nil
	}
	for _, c := range cs {
		a.jobs[c.JobID] = &heldJob{runID: c.RunID, epoch: c.Epoch, attempt: c.Attempt, ackDeadline: c.AckDeadline}
	}
	if a.oneJob && len(cs) > 0 {
		a.took = true
	}
	return cs
}

func (d *dispatcher) deliverAll(ctx context.Context, a *agent, cs []store.Claimed) {
	for _, c := range cs {
		d.deliver(ctx, a, c)
	}
}

// deliver sends a held job to its agent. A job that cannot be sent leaves
// the agent's slots and is failed (its spec is unreadable) or requeued (no
// checkout could be made for it).
func (d *dispatcher) deliver(ctx context.Context, a *agent, c store.Claimed) {
	f := d.f
	l := store.Lease{JobID: c.JobID, Epoch: c.Epoch}
	fail := func(why string, requeue bool) {
		a.finish(c.JobID, c.Epoch)
		f.cm.async(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
			if requeue {
				res, err := tx.Queue().Requeue(ctx, l, why)
				return res.Effects, err
			}
			return tx.Jobs().Complete(ctx, store.Completion{Lease: l, Status: kiln.JobFailed, Error: why})
		})
	}
	spec, err := jobspec.DecodeSendable(c.Spec)
	if err != nil {
		f.log.Error("fleet: a job's spec cannot be read; failing it", "job_id", c.JobID, "err", err)
		fail("kiln could not read the job's specification: "+err.Error(), false)
		return
	}
	var checkout *proto.Checkout
	if spec.Checkout != nil {
		if checkout, err = f.creds.Checkout(ctx, *spec.Checkout); err != nil {
			f.log.Error("fleet: preparing a dispatch failed; requeueing the job", "job_id", c.JobID, "err", err)
			fail("preparing the dispatch failed: "+err.Error(), true)
			return
		}
	}
	// The spec goes out as it was stored, only the checkout added.
	frame, err := proto.EncodeDispatch(&proto.Dispatch{JobID: c.JobID, RunID: c.RunID, LeaseEpoch: c.Epoch, Attempt: c.Attempt}, spec.Agent, checkout)
	if err != nil {
		f.log.Error("fleet: a dispatch cannot be encoded; failing the job", "job_id", c.JobID, "err", err)
		fail("kiln could not send the job to an agent: "+err.Error(), false)
		return
	}
	now := f.now()
	a.mu.Lock()
	if j := a.jobs[c.JobID]; j != nil && j.epoch == c.Epoch {
		j.sentAt = now // before the write: the ack may be read before it returns
	}
	a.mu.Unlock()
	if err := a.c.write(frame); err != nil {
		return // the connection is gone; its disconnect hands the job back
	}
	a.mu.Lock()
	if j := a.jobs[c.JobID]; j != nil && j.epoch == c.Epoch {
		j.sent = true
	}
	cancel := a.cancels[c.JobID]
	delete(a.cancels, c.JobID)
	a.mu.Unlock()
	f.stats.dispatched.Add(1)
	d.mu.Lock()
	woke, ok := d.wokeAt[c.JobID]
	delete(d.wokeAt, c.JobID)
	d.mu.Unlock()
	if !ok {
		// Claimed before its wake reached this dispatcher (released and
		// claimed in one commit, queued by another coordinator, or a pass
		// that ran first): from its stored queue time, to the millisecond.
		woke, ok = c.QueuedAt, !c.QueuedAt.IsZero()
	}
	if ok {
		f.stats.dispatchLatency.observe(max(0, now.Sub(woke)))
	}
	if cancel != nil && cancel.LeaseEpoch == c.Epoch {
		_ = a.c.send(cancel)
	}
}

// explain writes the pending reason of the keys still waiting, when it
// changed — or, after new jobs arrived (they enter the queue with a generic
// reason), for every waiting key.
func (d *dispatcher) explain(ctx context.Context, keys []string, live map[string]bool, fresh bool) {
	f := d.f
	// The time of the decision is taken before the scaler is asked: a
	// spawn that fails after this must keep its error as the jobs' reason.
	decided := f.now()
	present := make(map[string]bool, len(keys))
	updates := map[string]string{}
	for _, k := range keys {
		present[k] = true
		if !live[k] {
			continue
		}
		reason, ok := d.reason(k)
		if !ok {
			continue
		}
		if fresh || d.lastReason[k] != reason {
			updates[k] = reason
			d.lastReason[k] = reason
		}
	}
	for k := range d.lastReason {
		if !present[k] {
			delete(d.lastReason, k)
		}
	}
	if len(live) > 0 && f.cfg.Scaler != nil {
		f.cfg.Scaler.Wake()
	}
	if len(updates) > 0 {
		f.reasons.set(updates, decided)
	}
}

// reason says why jobs with the key wait; false when an agent could take
// them now (a claim will follow).
func (d *dispatcher) reason(key string) (string, bool) {
	req := store.KeyRequirement(key)
	matching := d.f.reg.matching(key)
	if s := d.f.cfg.Scaler; s != nil {
		for _, a := range matching {
			if a.freeSlots() > 0 {
				return "", false
			}
		}
		if r, ok := s.Reason(req); ok {
			return r, r != ""
		}
	}
	if len(matching) == 0 {
		return noAgentReason(req, d.f.reg.list()), true
	}
	var draining, busy int
	for _, a := range matching {
		if a.freeSlots() > 0 {
			return "", false
		}
		a.mu.Lock()
		if a.draining {
			draining++
		} else {
			busy++
		}
		a.mu.Unlock()
	}
	if busy == 0 {
		if draining == 1 {
			return "the one matching agent is draining", true
		}
		return fmt.Sprintf("all %d matching agents are draining", draining), true
	}
	return store.ReasonAgentsBusy(busy), true
}

// noAgentReason names what no connected agent offers and, when some agent
// is connected, the one that comes closest.
func noAgentReason(req kiln.Requirement, agents []*agent) string {
	reason := store.ReasonNoAgent(req)
	if len(req.Exclude) > 0 {
		reason += " and without " + joinLabels(req.Exclude)
	}
	var best *agent
	bestMissing := math.MaxInt
	for _, a := range agents {
		missing := 0
		for _, l := range req.RunsOn {
			if !a.labels.Labels.Has(l) {
				missing++
			}
		}
		if missing < bestMissing {
			best, bestMissing = a, missing
		}
	}
	if best != nil {
		reason += fmt.Sprintf(" (closest: agent %s %s)", best.id, best.labels.Explain(req))
	}
	return reason
}

func joinLabels(ls kiln.Labels) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += ", "
		}
		s += l
	}
	return s
}

// claimedOnCompletion sends the jobs an agent claimed in the transaction
// that completed its previous one (complete-and-claim), from the agent's
// own connection goroutine: only this agent waits on its write. took is
// the commit's time, observed as a claim's.
func (d *dispatcher) claimedOnCompletion(a *agent, held []store.Claimed, took time.Duration) {
	d.f.stats.claimLatency.observe(took)
	d.f.stats.claimedOnCompletion.Add(uint64(len(held)))
	d.f.took(a, held)
	d.deliverAll(context.Background(), a, held)
}
