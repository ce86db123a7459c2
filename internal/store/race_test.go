package store_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// TestClaimRace has N claimers, each with its own connection pool (on
// SQLite: its own writer connection to the same file), claim and complete
// thousands of jobs at once. Counting per job id: every job is claimed
// exactly once, under epoch 1, and every run rolls up.
// Proves B27 (docs/behaviours.md).
func TestClaimRace(t *testing.T) {
	const (
		claimers = 8
		runs     = 20
		perRun   = 100
	)
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			setup, err := store.Open(ctx, store.Config{URL: url, Releaser: storetest.QueueAsCreated})
			if err != nil {
				t.Fatal(err)
			}
			defer setup.Close()
			runIDs := make([]string, runs)
			for r := 0; r < runs; r++ {
				var jobs []store.NewJob
				for i := 0; i < perRun; i++ {
					jobs = append(jobs, store.NewJob{Name: fmt.Sprintf("j%d", i), Requirement: linuxReq()})
				}
				runIDs[r] = mustCreate(t, setup, newRun(jobs...)).ID
			}
			var mu sync.Mutex
			claims := map[string]int{}
			var wg sync.WaitGroup
			errs := make(chan error, claimers)
			for c := 0; c < claimers; c++ {
				db, err := store.Open(ctx, store.Config{URL: url, MaxConns: 2, Releaser: storetest.QueueAsCreated})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				agent := fmt.Sprintf("agent-%d", c)
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- claimUntilEmpty(db, agent, func(cs []store.Claimed) {
						mu.Lock()
						defer mu.Unlock()
						for _, c := range cs {
							claims[c.JobID]++
						}
					})
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(claims) != runs*perRun {
				t.Fatalf("%d distinct jobs claimed, want %d", len(claims), runs*perRun)
			}
			for id, n := range claims {
				if n != 1 {
					t.Fatalf("job %s claimed %d times", id, n)
				}
			}
			for _, id := range runIDs {
				r := wantRunStatus(t, setup, id, kiln.RunSuccess)
				for _, j := range r.Jobs {
					if j.Status != kiln.JobSuccess || j.LeaseEpoch != 1 || j.Attempts != 1 {
						t.Fatalf("job %s: %s epoch %d attempts %d", j.Name, j.Status, j.LeaseEpoch, j.Attempts)
					}
				}
			}
		})
	}
}

// claimUntilEmpty claims 1–5 jobs at a time and completes them in one
// batch, until the queue has nothing left for linux.
func claimUntilEmpty(db *store.DB, agent string, record func([]store.Claimed)) error {
	for {
		cs, err := db.Queue().Claim(ctx, agent, linux, 1+rand.IntN(5))
		if err != nil {
			return err
		}
		if len(cs) == 0 {
			// SKIP LOCKED may have skipped rows another claimer held: stop
			// only when nothing is queued any more.
			ok, err := db.Queue().HasMatch(ctx, linux)
			if err != nil || !ok {
				return err
			}
			continue
		}
		record(cs)
		done := make([]store.Completion, len(cs))
		for i, c := range cs {
			done[i] = store.Completion{Lease: lease(c), Status: kiln.JobSuccess}
		}
		errs, _, err := db.Jobs().CompleteBatch(ctx, done)
		if err != nil {
			return err
		}
		for _, e := range errs {
			if e != nil {
				return e
			}
		}
	}
}

// TestClaimRaceSharedPool has many agents of two kinds claim at once
// through one store, so claims are combined into shared statements: every
// job is claimed exactly once, by an agent that accepts it, and no claim
// gets more jobs than its slots.
// Proves B27 (docs/behaviours.md).
func TestClaimRaceSharedPool(t *testing.T) {
	const perKind = 600
	gpu := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "gpu"), Mandatory: kiln.NewLabels("gpu")}
	gpuReq := kiln.Requirement{RunsOn: kiln.NewLabels("linux", "gpu")}
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		for r := 0; r < perKind/100; r++ {
			var jobs []store.NewJob
			for i := 0; i < 100; i++ {
				jobs = append(jobs, store.NewJob{Name: fmt.Sprintf("cpu %d", i), Requirement: linuxReq()},
					store.NewJob{Name: fmt.Sprintf("gpu %d", i), Requirement: gpuReq})
			}
			mustCreate(t, db, newRun(jobs...))
		}
		var mu sync.Mutex
		owner := map[string]string{}
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for a := 0; a < 40; a++ {
			labels, kind := linux, "cpu"
			if a%2 == 1 {
				labels, kind = gpu, "gpu"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("%s-agent-%d", kind, a)
				for {
					slots := 1 + rand.IntN(4)
					cs, err := db.Queue().Claim(ctx, id, labels, slots)
					if err != nil {
						errs <- err
						return
					}
					if len(cs) > slots {
						errs <- fmt.Errorf("%s asked for %d jobs and got %d", id, slots, len(cs))
						return
					}
					if len(cs) == 0 {
						if ok, err := db.Queue().HasMatch(ctx, labels); err != nil || !ok {
							errs <- err
							return
						}
						continue
					}
					mu.Lock()
					for _, c := range cs {
						if prev, dup := owner[c.JobID]; dup {
							errs <- fmt.Errorf("job %s claimed by %s and %s", c.JobID, prev, id)
						}
						owner[c.JobID] = id
						if c.Name[:3] != kind {
							errs <- fmt.Errorf("%s claimed %s", id, c.Name)
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(owner) != 2*perKind {
			t.Fatalf("%d jobs claimed, want %d", len(owner), 2*perKind)
		}
	})
}
