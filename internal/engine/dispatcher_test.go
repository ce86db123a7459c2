package engine

import (
	"context"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Run applies what the dispatcher's own store operations committed, as it
// applies its own (agents woken and told to cancel, hooks told), and returns
// only once the dispatcher closed its Effects, so the effects of the
// fleet's last operations are not lost at shutdown.
func TestRunAppliesTheDispatchersEffects(t *testing.T) {
	clock := storetest.NewClock()
	rec := &recorder{effects: make(chan store.Effects)}
	applied := make(chan store.Effects, 4)
	cfg := testConfig(clock)
	cfg.Hooks.Applied = func(eff store.Effects) { applied <- eff }
	eng := New(storetest.New(t, storetest.ReleaseWith(Release)), rec, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()

	target := store.CancelTarget{JobID: "j2", RunID: "r", Name: "b", AgentID: "agent-1", Epoch: 3}
	rec.effects <- store.Effects{Queued: []store.JobRef{{ID: "j1", RunID: "r", Name: "a", Status: kiln.JobQueued}}}
	<-applied
	cancel()
	// After ctx ended, effects the fleet still commits are applied.
	rec.effects <- store.Effects{Cancel: []store.CancelTarget{target}}
	<-applied
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) before the dispatcher closed its effects", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(rec.effects)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.woken) != 1 || rec.woken[0].ID != "j1" || len(rec.cancels) != 1 || rec.cancels[0].t != target || rec.cancels[0].force {
		t.Fatalf("woken %+v, cancels %+v", rec.woken, rec.cancels)
	}
}
