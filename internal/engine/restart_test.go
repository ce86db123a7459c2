package engine

import (
	"context"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// What the sweeps act on is in the database, not in a server's memory: a
// graceful cancel asked before a restart is forced a cancel grace after the
// request, and a job found unroutable before a restart fails when the grace
// counted from that first sighting ends — not a grace after the restart.
// The restart is real: the store is closed and opened again and a new
// engine runs the sweeps.
// Proves B87 (docs/behaviours.md).
func TestCancelGraceAndUnroutableSurviveARestart(t *testing.T) {
	for _, be := range storetest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			url, clock := be.URL(t), storetest.NewClock()
			boot := func() bundle {
				d, err := store.Open(ctx, store.Config{URL: url, Clock: clock.Now, Releaser: Release})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				rec := &recorder{}
				return bundle{eng: New(d, rec, testConfig(clock)), db: d, rec: rec, clock: clock}
			}
			b := boot()
			if err := b.db.Auth().UpsertAgent(ctx, agentRecord("linux-1", linux)); err != nil {
				t.Fatal(err)
			}
			slow := start(t, b, "on: push\njobs:\n  a: {runs_on: [linux], steps: [{run: sleep 100}]}\n", pushEvent(), nil)
			claimed, err := b.db.Queue().Claim(ctx, "linux-1", linux, 1)
			if err != nil || len(claimed) != 1 {
				t.Fatalf("claim: %v %v", claimed, err)
			}
			if err := b.db.Jobs().Start(ctx, leaseOf(claimed[0].JobID, claimed[0].Epoch)); err != nil {
				t.Fatal(err)
			}
			if r, err := b.eng.Cancel(ctx, slow.ID, "cancelled by alice"); err != nil || r.Status != kiln.RunCancelling {
				t.Fatalf("graceful cancel: %s %v", r.Status, err)
			}
			gpu := start(t, b, "on: push\njobs:\n  train: {runs_on: [gpu], steps: [{run: train}]}\n", pushEvent(), nil)
			b.eng.Sweep(ctx) // the first sighting of train, which no known agent can run
			clock.Advance(30 * time.Second)
			b.eng.Sweep(ctx)
			if r := mustRun(t, b, slow.ID); r.Status != kiln.RunCancelling {
				t.Fatalf("the cancel was forced before its grace: %s", r.Status)
			}
			if j := job(t, b, gpu.ID, "train"); j.Status != kiln.JobQueued {
				t.Fatalf("train failed before its grace: %s", j.Status)
			}

			if err := b.db.Close(); err != nil {
				t.Fatal(err)
			}
			b = boot()
			clock.Advance(31 * time.Second) // a minute and a second after the cancel and the sighting
			b.eng.Sweep(ctx)

			if r := mustRun(t, b, slow.ID); r.Status != kiln.RunCancelled {
				t.Fatalf("the cancel asked before the restart was not forced after its grace: run %s", r.Status)
			}
			if len(b.rec.cancels) != 1 || !b.rec.cancels[0].force || b.rec.cancels[0].t.AgentID != "linux-1" {
				t.Fatalf("the agent was not told to kill the job: %+v", b.rec.cancels)
			}
			if j := job(t, b, gpu.ID, "train"); j.Status != kiln.JobUnroutable {
				t.Fatalf("train, unroutable since before the restart, is %s a grace later", j.Status)
			}
		})
	}
}

// A job's unroutable mark is cleared when an agent that can run it is
// known again, so a later spell without one gets the whole grace; and a
// job entering the queue again starts unmarked.
// Proves B33 (docs/behaviours.md).
func TestUnroutableGraceStartsOverWhenAnAgentAppears(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		gpuAgent := kiln.AgentLabels{Labels: kiln.Labels{"gpu", "linux"}}
		run := start(t, b, "on: push\njobs:\n  train: {runs_on: [gpu], steps: [{run: train}]}\n", pushEvent(), nil)
		b.eng.Sweep(ctx) // first sighting
		b.clock.Advance(50 * time.Second)
		if err := b.db.Auth().UpsertAgent(ctx, agentRecord("gpu-1", gpuAgent)); err != nil {
			t.Fatal(err)
		}
		b.eng.Sweep(ctx) // routable: the mark goes
		// gpu-1 registers again without its gpu label.
		loseGPU := func() {
			t.Helper()
			if err := b.db.Auth().UpsertAgent(ctx, agentRecord("gpu-1", linux)); err != nil {
				t.Fatal(err)
			}
		}
		loseGPU()
		b.clock.Advance(20 * time.Second)
		b.eng.Sweep(ctx) // unroutable again, from now
		b.clock.Advance(50 * time.Second)
		b.eng.Sweep(ctx)
		if j := job(t, b, run.ID, "train"); j.Status != kiln.JobQueued {
			t.Fatalf("train failed 50s into its second spell: %s", j.Status)
		}
		// Claimed and rejected: back in the queue, unmarked again.
		if err := b.db.Auth().UpsertAgent(ctx, agentRecord("gpu-1", gpuAgent)); err != nil {
			t.Fatal(err)
		}
		claimed, err := b.db.Queue().Claim(ctx, "gpu-1", gpuAgent, 1)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		loseGPU()
		if _, err := b.db.Queue().Requeue(ctx, leaseOf(claimed[0].JobID, claimed[0].Epoch), "busy"); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(20 * time.Second) // 70s since the second spell began
		b.eng.Sweep(ctx)
		if j := job(t, b, run.ID, "train"); j.Status != kiln.JobQueued {
			t.Fatalf("train, requeued, failed on its old mark: %s", j.Status)
		}
		b.clock.Advance(61 * time.Second)
		b.eng.Sweep(ctx)
		if j := job(t, b, run.ID, "train"); j.Status != kiln.JobUnroutable {
			t.Fatalf("train a grace after its requeue: %s", j.Status)
		}
	})
}
