package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// hookLog records what the engine's hooks were told.
type hookLog struct {
	mu         sync.Mutex
	finished   []store.JobRef
	runs       []store.RunChange
	unroutable []int
}

func (h *hookLog) hooks() Hooks {
	return Hooks{
		Applied: func(eff store.Effects) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.finished = append(h.finished, eff.Finished...)
			h.runs = append(h.runs, eff.Runs...)
		},
		Unroutable: func(n int) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.unroutable = append(h.unroutable, n)
		},
	}
}

func TestHooksSeeFinishedJobsRunsAndUnroutable(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		h := &hookLog{}
		cfg := testConfig(b.clock)
		cfg.Hooks = h.hooks()
		b.eng = New(b.db, b.rec, cfg)
		if err := b.db.Auth().UpsertAgent(ctx, agentRecord("linux-1", linux)); err != nil {
			t.Fatal(err)
		}
		run := start(t, b, `
on: push
jobs:
  gpu: {runs_on: [gpu], steps: [{run: train}]}
  cpu: {runs_on: [linux], steps: [{run: make}]}
`, pushEvent(), nil)
		b.eng.Sweep(ctx)
		b.clock.Advance(2 * time.Minute)
		b.eng.Sweep(ctx)
		finish(t, b, linux, "cpu", kiln.JobSuccess, nil)

		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.unroutable) != 1 || h.unroutable[0] != 1 {
			t.Fatalf("unroutable hook: %v, want [1]", h.unroutable)
		}
		got := map[string]kiln.JobStatus{}
		for _, j := range h.finished {
			got[j.Name] = j.Status
		}
		if len(h.finished) != 2 || got["gpu"] != kiln.JobUnroutable || got["cpu"] != kiln.JobSuccess {
			t.Fatalf("finished jobs: %+v", h.finished)
		}
		last := h.runs[len(h.runs)-1]
		if last.ID != run.ID || last.Status != kiln.RunFailed {
			t.Fatalf("last run change %+v, want run %s failed", last, run.ID)
		}
	})
}
