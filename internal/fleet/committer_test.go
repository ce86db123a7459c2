package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The committer runs the operations waiting together in one transaction:
// consecutive completions as one CompleteBatch, a refusal as that
// operation's answer, and an operation that fails the transaction retried
// alone so that only it fails. The effects are emitted once, after the
// commit, and an operation that changed nothing emits none.
func TestCommitterBatch(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		cs := claimedJobs(t, db, "a", "b", "c")
		var mu sync.Mutex
		var applied []store.Effects
		emit := func(eff store.Effects) {
			mu.Lock()
			applied = append(applied, eff)
			mu.Unlock()
		}
		var counters counters
		cm := newCommitter(db, emit, 16, func(string, ...any) {}, &counters)
		complete := func(c store.Claimed, epoch int64) *op {
			return &op{complete: &store.Completion{Lease: store.Lease{JobID: c.JobID, Epoch: epoch}, Status: kiln.JobSuccess}, done: make(chan error, 1)}
		}
		boom := errors.New("boom")
		ops := []*op{
			complete(cs[0], cs[0].Epoch),
			complete(cs[1], cs[1].Epoch+1), // a stale lease
			{run: func(context.Context, *store.Tx) (store.Effects, error) { return store.Effects{}, boom }, done: make(chan error, 1)},
			complete(cs[2], cs[2].Epoch),
		}
		results := commitTogether(t, cm, ops)
		if results[0] != nil || !errors.Is(results[1], store.ErrStaleLease) || !errors.Is(results[2], boom) || results[3] != nil {
			t.Fatalf("results %v", results)
		}
		for i, want := range []kiln.JobStatus{kiln.JobSuccess, kiln.JobDispatched, kiln.JobSuccess} {
			if j, _ := db.Jobs().Get(bg, cs[i].JobID); j.Status != want {
				t.Errorf("job %d is %s, want %s", i, j.Status, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		finished := 0
		for _, e := range applied {
			finished += len(e.Finished)
		}
		if finished != 2 {
			t.Fatalf("the engine saw %d finished jobs: %+v", finished, applied)
		}
		if err := cm.do(func(context.Context, *store.Tx) (store.Effects, error) { return store.Effects{}, nil }); err != nil {
			t.Fatal(err)
		}
	})
}

// One batch's completions asking to settle are checked for uploads with
// one read (B217): a success whose job has an upload in flight is handed
// back (errUnsettled) with nothing stored, while the others in the batch
// complete; handed in again without the check, it completes. Consecutive
// starts in the batch move in one statement, each under its own lease.
func TestCommitterSettleAndStartsInOneBatch(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		cs := claimedJobs(t, db, "a", "b", "c", "d")
		if err := db.Uploads().Begin(bg, "up-1", cs[1].JobID, "cache", "k"); err != nil {
			t.Fatal(err)
		}
		var counters counters
		cm := newCommitter(db, func(store.Effects) {}, 16, func(string, ...any) {}, &counters)
		lease := func(c store.Claimed) store.Lease { return store.Lease{JobID: c.JobID, Epoch: c.Epoch} }
		complete := func(c store.Claimed, settle bool) *op {
			return &op{complete: &store.Completion{Lease: lease(c), Status: kiln.JobSuccess}, settle: settle, done: make(chan error, 1)}
		}
		stale := lease(cs[3])
		stale.Epoch++
		ops := []*op{
			{start: &stale, done: make(chan error, 1)},
			{start: &store.Lease{JobID: cs[3].JobID, Epoch: cs[3].Epoch}, done: make(chan error, 1)},
			complete(cs[0], true), complete(cs[1], true), complete(cs[2], true),
		}
		results := commitTogether(t, cm, ops)
		if !errors.Is(results[0], store.ErrStaleLease) || results[1] != nil || results[2] != nil ||
			!errors.Is(results[3], errUnsettled) || results[4] != nil {
			t.Fatalf("results %v", results)
		}
		for i, want := range []kiln.JobStatus{kiln.JobSuccess, kiln.JobDispatched, kiln.JobSuccess, kiln.JobRunning} {
			if j, _ := db.Jobs().Get(bg, cs[i].JobID); j.Status != want {
				t.Errorf("job %s is %s, want %s", cs[i].Name, j.Status, want)
			}
		}
		if _, err := cm.completeJob(*complete(cs[1], false).complete, nil, nil, false); err != nil {
			t.Fatal(err)
		}
		if j, _ := db.Jobs().Get(bg, cs[1].JobID); j.Status != kiln.JobSuccess {
			t.Fatalf("handed in again, b is %s", j.Status)
		}
	})
}

// commitTogether hands the operations to a committer before it runs, so
// they commit in one batch, and returns their results; the committer runs
// until the test ends.
func commitTogether(t *testing.T, cm *committer, ops []*op) []error {
	t.Helper()
	for _, o := range ops {
		if err := cm.submit(o); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	go cm.run(ctx)
	t.Cleanup(func() { cm.shutdown(); cancel() })
	results := make([]error, len(ops))
	for i, o := range ops {
		results[i] = <-o.done
	}
	return results
}

// Between two operations of other kinds, a batch's starts go before its
// completions (one StartBatch, one CompleteBatch), each kind in the order
// it came; the other operations keep their place.
func TestCommitterGroupsAlikeReports(t *testing.T) {
	start := func(id string) *op { return &op{start: &store.Lease{JobID: id}} }
	complete := func(id string) *op {
		return &op{complete: &store.Completion{Lease: store.Lease{JobID: id}}}
	}
	sweep := &op{run: func(context.Context, *store.Tx) (store.Effects, error) { return store.Effects{}, nil }}
	batch := []*op{complete("c1"), start("s1"), complete("c2"), start("s2"), sweep, complete("c3"), start("s3"), start("s4")}
	alike(batch)
	var got []string
	for _, o := range batch {
		switch {
		case o.start != nil:
			got = append(got, o.start.JobID)
		case o.complete != nil:
			got = append(got, o.complete.JobID)
		default:
			got = append(got, "sweep")
		}
	}
	want := []string{"s1", "s2", "c1", "c2", "sweep", "s3", "s4", "c3"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// A start and the end of the same job in one stretch of a batch are stored
// by one move (merge): the start's result is its end's, the job has a start
// time; a start whose end must wait for its uploads (B217) is stored alone;
// a start with no end in the batch, or one separated from it by another
// kind of operation, is a start of its own.
// Proves B155 (docs/behaviours.md).
func TestCommitterMergesAStartIntoItsEnd(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		cs := claimedJobs(t, db, "a", "b", "c", "d", "e")
		if err := db.Uploads().Begin(bg, "up-1", cs[3].JobID, "cache", "k"); err != nil {
			t.Fatal(err)
		}
		var counters counters
		cm := newCommitter(db, func(store.Effects) {}, 16, func(string, ...any) {}, &counters)
		lease := func(c store.Claimed) store.Lease { return store.Lease{JobID: c.JobID, Epoch: c.Epoch} }
		start := func(l store.Lease) *op { return &op{start: &l, done: make(chan error, 1)} }
		complete := func(l store.Lease) *op {
			return &op{complete: &store.Completion{Lease: l, Status: kiln.JobSuccess}, settle: true, done: make(chan error, 1)}
		}
		staleB := lease(cs[1])
		staleB.Epoch++
		sweep := &op{run: func(context.Context, *store.Tx) (store.Effects, error) { return store.Effects{}, nil }, done: make(chan error, 1)}
		ops := []*op{
			start(lease(cs[0])), start(staleB), start(lease(cs[2])), start(lease(cs[3])), start(lease(cs[4])),
			complete(lease(cs[0])), complete(staleB), complete(lease(cs[3])),
			sweep, complete(lease(cs[4])),
		}
		results := commitTogether(t, cm, ops)
		want := []error{nil, store.ErrStaleLease, nil, nil, nil, nil, store.ErrStaleLease, errUnsettled, nil, nil}
		for i, w := range want {
			if (w == nil) != (results[i] == nil) || w != nil && !errors.Is(results[i], w) {
				t.Errorf("op %d: %v, want %v", i, results[i], w)
			}
		}
		for i, want := range []kiln.JobStatus{kiln.JobSuccess, kiln.JobDispatched, kiln.JobRunning, kiln.JobRunning, kiln.JobSuccess} {
			j, _ := db.Jobs().Get(bg, cs[i].JobID)
			if j.Status != want {
				t.Errorf("job %s is %s, want %s", cs[i].Name, j.Status, want)
			}
			if started := !j.StartedAt.IsZero(); started != (want != kiln.JobDispatched) {
				t.Errorf("job %s (%s) started at %v", cs[i].Name, j.Status, j.StartedAt)
			}
		}
		if got := counters.batchedOps.Load(); got != uint64(len(ops)-3) {
			t.Errorf("the batch ran %d operations, want %d (three starts folded into their ends)", got, len(ops)-3)
		}
	})
}

// claimedJobs creates a run of the named jobs and claims them all for one
// agent, in order.
func claimedJobs(t *testing.T, db *store.DB, names ...string) []store.Claimed {
	t.Helper()
	nr := store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "r", SHA: "s", Event: json.RawMessage(`{}`)}
	for _, n := range names {
		nr.Jobs = append(nr.Jobs, store.NewJob{Name: n, Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux")}, Spec: specJSON(n)})
	}
	if _, err := db.Runs().Create(bg, nr); err != nil {
		t.Fatal(err)
	}
	cs, err := db.Queue().Claim(bg, "agent", kiln.AgentLabels{Labels: kiln.NewLabels("linux")}, len(names))
	if err != nil || len(cs) != len(names) {
		t.Fatalf("claim %v %v", cs, err)
	}
	return cs
}
