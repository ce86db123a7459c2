package ingress

import (
	"context"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

const nightly = `
on:
  schedule:
    - cron: "*/5 * * * *"
jobs:
  sweep:
    steps: [{run: ./sweep}]
`

// Proves B7 (docs/behaviours.md).
func TestSchedulesFireOncePerTickAndCatchUpOnce(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		f.gh.SetFiles(repo, headSHA, "master", map[string]string{".kiln/workflows/ci.yml": ciYAML, ".kiln/workflows/nightly.yml": nightly})
		// A push to the default branch registers its schedules.
		_, out := f.send(t, "push", "sched", payload(t, "push.with-new-branch.payload.json"), "")
		f.finished(t, deliveryID(t, out))
		list, err := f.db.Cluster().Schedules(ctx)
		if err != nil || len(list) != 1 || list[0].Cron != "*/5 * * * *" || list[0].SHA != headSHA {
			t.Fatalf("schedules: %+v, %v", list, err)
		}
		sched := NewScheduler(f.db, f.eng, time.Minute, f.clock.Now, nil)
		runs := func() []store.Run {
			rs, _ := f.db.Runs().List(ctx, store.RunFilter{Workflow: "nightly", Limit: 100})
			return rs
		}
		if err := sched.Tick(ctx); err != nil || len(runs()) != 0 {
			t.Fatalf("fired before its time: %d runs, %v", len(runs()), err)
		}
		f.clock.Advance(6 * time.Minute)
		sched.Tick(ctx)
		sched.Tick(ctx) // a second tick in the same period fires nothing more
		rs := runs()
		if len(rs) != 1 {
			t.Fatalf("%d runs after one period, want 1", len(rs))
		}
		var ev kiln.Event
		if err := jsonUnmarshal(rs[0].Event, &ev); err != nil || ev.Name != kiln.EventSchedule || ev.Schedule != "*/5 * * * *" || ev.SHA != headSHA {
			t.Fatalf("schedule event: %+v %v", ev, err)
		}
		// Down for an hour: the missed fires are caught up once.
		f.clock.Advance(time.Hour)
		sched.Tick(ctx)
		if n := len(runs()); n != 2 {
			t.Fatalf("%d runs after an hour down, want 2 (one catch-up)", n)
		}
		// Another scheduler (a second coordinator) cannot fire the same time again.
		other := NewScheduler(f.db, f.eng, time.Minute, f.clock.Now, nil)
		other.Tick(ctx)
		if n := len(runs()); n != 2 {
			t.Fatalf("a second scheduler fired again: %d runs", n)
		}
	})
}
