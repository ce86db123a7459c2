package fleet

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// The committer is the fleet's one writer of job state. Connections, the
// dispatcher, the disconnect function and the monitor's sweeps hand it
// operations; it runs as many as are waiting in one transaction (one
// commit, one fsync, for many agents), then emits the merged effects for
// the engine in commit order and wakes the callers.
//
// Because every job write of the fleet passes through it, they are ordered:
// a claim for an agent and that agent's loss commit one after the other,
// never interleaved. The engine and the ingress write jobs too, in
// transactions of their own; every such write is a compare-and-set, so
// whichever commits second changes only what is still as it expects.

// op is one store operation. run executes it inside the batch transaction;
// it may run more than once (PostgreSQL reruns a transaction chosen as a
// deadlock victim, and a failed batch is retried one operation at a time),
// so it must reset whatever it captures. A refusal (a stale lease, a job
// already finished, an unknown token) is the operation's result and does
// not fail the batch: refusals change nothing.
type op struct {
	run  func(ctx context.Context, tx *store.Tx) (store.Effects, error)
	done chan error // buffered; nil: nobody waits
	// complete, instead of run, ends a job (indexing its step logs first):
	// consecutive completions in a batch go to the store as one
	// CompleteBatch, which moves alike jobs in one statement.
	complete *store.Completion
	chunks   []store.Chunk
	// next, with complete, is complete-and-claim: the finishing agent's
	// next job, claimed in the transaction that commits the completion
	// (when that completion is not refused), into claimed.
	next    *store.ClaimAsk
	claimed []store.Claimed
	// settle, with complete, asks that the completion wait for the job's
	// uploads in flight: if it has any, the completion is not stored and
	// its result is errUnsettled.
	settle bool
	// start, instead of run, moves a job its agent began to running:
	// consecutive starts in a batch go to the store as one StartBatch.
	start *store.Lease
	// startOf, with complete, is the start of the same job handed in the
	// same batch (merge): the completion stores both in one move, and
	// startErr is the start's result.
	startOf  *op
	startErr error
}

var errStopped = errors.New("fleet: the orchestrator is shutting down")

// errUnsettled answers a completion asked to settle whose job has uploads
// in flight: nothing was stored; the caller waits for the uploads (the
// settle, B217) and hands the completion in again.
var errUnsettled = errors.New("fleet: the job has uploads in flight")

type committer struct {
	held  *store.Held // the connection every batch commits on
	emit  func(store.Effects)
	max   int
	ch    chan *op
	stop  chan struct{}
	done  chan struct{}
	log   func(msg string, args ...any)
	stats *counters

	// mu guards stopped; submitters hold it shared while they send, so
	// shutdown, which takes it exclusively, knows no send is under way.
	mu      sync.RWMutex
	stopped bool
}

func newCommitter(db *store.DB, emit func(store.Effects), max int, log func(string, ...any), stats *counters) *committer {
	cm := &committer{emit: emit, max: max, ch: make(chan *op, 4*max),
		stop: make(chan struct{}), done: make(chan struct{}), log: log, stats: stats}
	// A batch committed while operations wait begins the next one's
	// transaction in its commit's round trip.
	cm.held = db.Hold(func() bool { return len(cm.ch) > 0 })
	return cm
}

// refusal reports whether err is an operation's answer rather than a
// failure of the transaction: nothing was written, the rest of the batch
// may commit.
func refusal(err error) bool {
	return errors.Is(err, store.ErrStaleLease) || errors.Is(err, store.ErrConflict) ||
		errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) ||
		errors.Is(err, store.ErrUnauthorized)
}

// do runs fn and waits for its result.
func (cm *committer) do(fn func(ctx context.Context, tx *store.Tx) (store.Effects, error)) error {
	o := &op{run: fn, done: make(chan error, 1)}
	if err := cm.submit(o); err != nil {
		return err
	}
	return <-o.done
}

// completeJob ends a job and waits for the result. With next, the same
// transaction claims the agent's next job: the claimed jobs are returned
// when the completion committed (err nil).
// With settle, a job with uploads in flight is not completed: the error is
// errUnsettled.
func (cm *committer) completeJob(c store.Completion, chunks []store.Chunk, next *store.ClaimAsk, settle bool) ([]store.Claimed, error) {
	o := &op{complete: &c, chunks: chunks, next: next, settle: settle, done: make(chan error, 1)}
	if err := cm.submit(o); err != nil {
		return nil, err
	}
	if err := <-o.done; err != nil {
		return nil, err
	}
	return o.claimed, nil
}

// startJobAsync hands in the move of a job its agent began to running;
// its result (nil, or the store's refusal) arrives on the op's done.
// Starts waiting in one batch commit in one statement (StartBatch), and a
// start whose job's end is in the same batch rides with that end (merge).
func (cm *committer) startJobAsync(l store.Lease) (*op, error) {
	o := &op{start: &l, done: make(chan error, 1)}
	if err := cm.submit(o); err != nil {
		return nil, err
	}
	return o, nil
}

// async runs fn without waiting.
func (cm *committer) async(fn func(ctx context.Context, tx *store.Tx) (store.Effects, error)) {
	_ = cm.submit(&op{run: fn})
}

func (cm *committer) submit(o *op) error {
	cm.mu.RLock()
	defer cm.mu.RUnlock()
	if cm.stopped {
		return errStopped
	}
	// The queue is long and drained by run even while shutdown waits for
	// the lock, so this blocks only while the database is behind.
	cm.ch <- o
	return nil
}

// run commits batches until shutdown, then what is still queued.
func (cm *committer) run(ctx context.Context) {
	defer close(cm.done)
	defer cm.held.Close()
	batch := make([]*op, 0, cm.max)
	for {
		var o *op
		select {
		case o = <-cm.ch:
		case <-cm.stop:
			cm.drain(ctx)
			return
		}
		batch = append(batch[:0], o)
	fill:
		for len(batch) < cm.max {
			select {
			case o := <-cm.ch:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		alike(batch)
		batch = merge(batch)
		cm.commit(ctx, batch)
	}
}

// merge folds each start into the completion of the same job when both
// are in one stretch of reports (after alike, so the start is first): the
// job moves from dispatched to its end in one update instead of two. An
// agent hands in a job's end right after its start without waiting for
// the start's commit (gateStart), so for a job that ends at once — every
// no-op job at saturation — both land in one batch. On PostgreSQL a job's
// update touches every index whose predicate names its status; the start's
// was ~80 µs of the committer's ~330 µs per job.
func merge(batch []*op) []*op {
	var folded map[*op]bool
	for i := 0; i < len(batch); {
		j := i
		var starts map[store.Lease]*op
		for ; j < len(batch) && batch[j].run == nil; j++ {
			switch o := batch[j]; {
			case o.start != nil:
				if starts == nil {
					starts = map[store.Lease]*op{}
				}
				if _, dup := starts[*o.start]; !dup {
					starts[*o.start] = o
				}
			case o.complete != nil && starts != nil:
				if s := starts[o.complete.Lease]; s != nil {
					o.startOf = s
					if folded == nil {
						folded = map[*op]bool{}
					}
					folded[s] = true
					delete(starts, o.complete.Lease)
				}
			}
		}
		i = j + 1
	}
	if folded == nil {
		return batch
	}
	return slices.DeleteFunc(batch, func(o *op) bool { return folded[o] })
}

// alike reorders a batch so that, between two operations of other kinds,
// every start comes before every completion: each such stretch then costs
// one StartBatch and one CompleteBatch — one set of statements, each a
// round trip — however its agents' reports interleaved (they alternate at
// saturation, and each alternation cost a CompleteBatch of its own: ~16
// round trips per batch instead of ~9, measured in kiln bench). Within a
// stretch only a job's start and its end can concern the same job — a
// connection waits for every report but a start to commit before it hands
// in the next — and the start, sent first, stays first; other operations
// (sweeps, claims, losses) keep their place.
func alike(batch []*op) {
	for i := 0; i < len(batch); {
		j := i
		for j < len(batch) && batch[j].run == nil {
			j++
		}
		if j-i > 1 {
			slices.SortStableFunc(batch[i:j], func(a, b *op) int {
				return cmp.Compare(rank(a), rank(b))
			})
		}
		i = j + 1
	}
}

// rank orders a stretch of reports: starts, then completions.
func rank(o *op) int {
	if o.start != nil {
		return 0
	}
	return 1
}

// drain marks the committer stopped, committing what senders still hand it
// until none can, then what is left in the queue.
func (cm *committer) drain(ctx context.Context) {
	locked := make(chan struct{})
	go func() {
		cm.mu.Lock()
		cm.stopped = true
		cm.mu.Unlock()
		close(locked)
	}()
wait:
	for {
		select {
		case o := <-cm.ch:
			cm.commit(ctx, []*op{o})
		case <-locked:
			break wait
		}
	}
	for {
		select {
		case o := <-cm.ch:
			cm.commit(ctx, []*op{o})
		default:
			return
		}
	}
}

// shutdown commits what is queued and stops; later submits fail.
func (cm *committer) shutdown() {
	close(cm.stop)
	<-cm.done
}

func (cm *committer) commit(ctx context.Context, batch []*op) {
	results := make([]error, len(batch))
	effects := make([]store.Effects, len(batch))
	err := cm.held.Update(ctx, func(tx *store.Tx) error {
		for i := 0; i < len(batch); {
			if batch[i].complete != nil {
				n, err := cm.completions(ctx, tx, batch[i:], results[i:], effects[i:])
				if err != nil {
					return err
				}
				i += n
				continue
			}
			if batch[i].start != nil {
				n, err := cm.starts(ctx, tx, batch[i:], results[i:])
				if err != nil {
					return err
				}
				i += n
				continue
			}
			eff, err := batch[i].run(ctx, tx)
			if err != nil && !refusal(err) {
				return err
			}
			results[i], effects[i] = err, eff
			if err != nil {
				effects[i] = store.Effects{}
			}
			i++
		}
		return nil
	})
	if err != nil && len(batch) > 1 {
		// One operation failed the transaction: retry each alone, so
		// only it fails.
		cm.log("fleet: a batch of store operations failed; retrying them one by one", "ops", len(batch), "err", err)
		for _, o := range batch {
			cm.commit(ctx, []*op{o})
		}
		return
	}
	if err != nil {
		results[0], effects[0] = err, store.Effects{}
	}
	cm.stats.batches.Add(1)
	cm.stats.batchedOps.Add(uint64(len(batch)))
	var merged store.Effects
	for _, e := range effects {
		mergeEffects(&merged, e)
	}
	if len(merged.Queued)+len(merged.Finished)+len(merged.Cancel)+len(merged.Runs) > 0 {
		cm.emit(merged)
	}
	for i, o := range batch {
		if o.done != nil {
			o.done <- results[i]
		} else if results[i] != nil && !refusal(results[i]) {
			cm.log("fleet: a store operation failed", "err", results[i])
		}
		if s := o.startOf; s != nil {
			if err != nil {
				o.startErr = err
			}
			s.done <- o.startErr
		}
	}
}

// starts runs the starts at the head of ops as one StartBatch and returns
// how many it ran.
func (cm *committer) starts(ctx context.Context, tx *store.Tx, ops []*op, results []error) (int, error) {
	n := 0
	for n < len(ops) && ops[n].start != nil {
		n++
	}
	leases := make([]store.Lease, n)
	for i, o := range ops[:n] {
		leases[i] = *o.start
	}
	errs, err := tx.Jobs().StartBatch(ctx, leases)
	if err != nil {
		return 0, err
	}
	copy(results, errs)
	return n, nil
}

// startsLeftOut stores the merged starts of completions left out to
// settle: the job's end waits for its uploads, its start does not.
func (cm *committer) startsLeftOut(ctx context.Context, tx *store.Tx, ops []*op) error {
	if len(ops) == 0 {
		return nil
	}
	leases := make([]store.Lease, len(ops))
	for i, o := range ops {
		leases[i] = *o.startOf.start
	}
	errs, err := tx.Jobs().StartBatch(ctx, leases)
	if err != nil {
		return err
	}
	for i, o := range ops {
		o.startErr = errs[i]
	}
	return nil
}

// completions runs the completions at the head of ops as one CompleteBatch
// and returns how many it ran.
func (cm *committer) completions(ctx context.Context, tx *store.Tx, ops []*op, results []error, effects []store.Effects) (int, error) {
	n := 0
	for n < len(ops) && ops[n].complete != nil {
		n++
	}
	for i := range n {
		ops[i].claimed, ops[i].startErr = nil, nil // the transaction may be run again
		effects[i] = store.Effects{}
	}
	// The settle's check rides in the store's batch (one read for all,
	// in the statement locking their runs): a success whose job has
	// uploads in flight is left out (its caller waits and hands it in
	// again), with its log index and its next claim.
	cs := make([]store.Completion, n)
	for i, o := range ops[:n] {
		cs[i] = *o.complete
		cs[i].Settle = o.settle
		cs[i].Started = o.startOf != nil
	}
	// The ends' roll-up check rides in the next claims' statement (one
	// round trip less on PostgreSQL); FlushRollUps, at the end, returns
	// what it changed.
	tx.DeferRollUps()
	errs, eff, err := tx.Jobs().CompleteBatch(ctx, cs)
	if err != nil {
		return 0, err
	}
	var at []int // the completions not left out to settle
	var chunks []store.Chunk
	var unsettledStarts []*op
	for i, e := range errs {
		results[i] = e
		ops[i].startErr = e // a merged start stands or falls with its end
		if errors.Is(e, store.ErrUnsettled) {
			results[i] = errUnsettled
			if ops[i].startOf != nil {
				unsettledStarts = append(unsettledStarts, ops[i])
			}
			continue
		}
		at = append(at, i)
		chunks = append(chunks, ops[i].chunks...)
	}
	if err := cm.startsLeftOut(ctx, tx, unsettledStarts); err != nil {
		return 0, err
	}
	if len(at) == 0 {
		// Every end waits to settle: nothing ended, nothing to roll up,
		// but the deferral ends here, before the batch's other operations.
		if _, err := tx.FlushRollUps(ctx); err != nil {
			return 0, err
		}
		return n, nil
	}
	if len(chunks) > 0 {
		// The step logs are stored; their index is a convenience that
		// never holds a completion back.
		if err := tx.Logs().Append(ctx, chunks...); err != nil {
			if !refusal(err) {
				return 0, err
			}
			cm.log("fleet: a log chunk was not indexed", "err", err)
		}
	}
	// Complete-and-claim: the agents whose completions stand take their
	// next jobs in this transaction, one commit for both, and agents
	// accepting the same work share the claim's statement. The claim sees
	// the jobs these completions released.
	var asks []store.ClaimAsk
	var askers []*op
	for _, i := range at {
		if o := ops[i]; o.next != nil && errs[i] == nil {
			asks, askers = append(asks, *o.next), append(askers, o)
		}
	}
	if len(asks) > 0 {
		got, err := tx.Queue().ClaimFor(ctx, asks)
		if err != nil {
			return 0, err
		}
		for i, o := range askers {
			o.claimed = got[i]
			for _, c := range got[i] {
				if c.RunStarted {
					eff.Runs = append(eff.Runs, store.RunChange{ID: c.RunID, Status: kiln.RunRunning})
				}
			}
		}
	}
	rolled, err := tx.FlushRollUps(ctx)
	if err != nil {
		return 0, err
	}
	mergeEffects(&eff, rolled)
	effects[at[0]] = eff
	return n, nil
}
