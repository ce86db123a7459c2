package metrics

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type rig struct {
	m   *Metrics
	reg *prometheus.Registry
	eng *engine.Engine
	db  *store.DB
	log *syncBuffer
}

// newRig builds metrics over a real SQLite store and engine.
func newRig(t testing.TB, cfg Config) rig {
	t.Helper()
	db := storetest.New(t, storetest.ReleaseWith(engine.Release))
	buf := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(buf, nil))
	reg := prometheus.NewRegistry()
	m, err := New(reg, Deps{Queue: db.Queue(), Runs: db.Runs()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(db, nil, engine.Config{Hooks: m.EngineHooks()})
	return rig{m: m, reg: reg, eng: eng, db: db, log: buf}
}

// queue starts a run with one job per runs_on label set; the jobs queue.
func (r rig) queue(t testing.TB, runsOn ...string) store.CreatedRun {
	t.Helper()
	var b strings.Builder
	b.WriteString("on: push\njobs:\n")
	for i, l := range runsOn {
		fmt.Fprintf(&b, "  j%d: {runs_on: [%s], steps: [{run: 'true'}]}\n", i, l)
	}
	wf, err := workflow.Parse(".kiln/workflows/ci.yml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	ev := &kiln.Event{Name: kiln.EventPush, Ref: "refs/heads/main", Branch: "main", SHA: strings.Repeat("a", 40), Repository: "acme/app"}
	runs, err := r.eng.Start(context.Background(), engine.StartRequest{Event: ev, Matches: []engine.Match{
		{Workflow: wf, Content: []byte(b.String()), Decision: trigger.Match(wf, ev)},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return runs[0]
}

// gauge returns the value of the series name{labels}, and whether it exists.
func (r rig) value(t *testing.T, name string, labels ...string) (float64, bool) {
	t.Helper()
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.Gauge != nil:
					return m.GetGauge().GetValue(), true
				case m.Counter != nil:
					return m.GetCounter().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func (r rig) series(t *testing.T, name string) int {
	t.Helper()
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, kv []string) bool {
	if len(m.GetLabel()) != len(kv)/2 {
		return false
	}
	for i := 0; i < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (r rig) want(t *testing.T, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := r.value(t, name, labels...)
	if !ok {
		t.Fatalf("%s%v: no series", name, labels)
	}
	if got != v {
		t.Fatalf("%s%v = %v, want %v", name, labels, got, v)
	}
}

// B65: kiln_dispatch_queue_depth always has both the pending and the
// dispatched series, 0 when the queue is empty — before the first refresh,
// after a refresh of an empty queue, and after the queue drained; and (B64)
// the labels of the drained queue keep reporting 0.
func TestQueueDepthAlwaysHasPendingAndDispatched(t *testing.T) {
	r := newRig(t, Config{})
	ctx := context.Background()
	check := func(when string, pending float64) {
		t.Helper()
		if n := r.series(t, "kiln_dispatch_queue_depth"); n != 2 {
			t.Fatalf("%s: %d series of kiln_dispatch_queue_depth, want 2", when, n)
		}
		r.want(t, pending, "kiln_dispatch_queue_depth", "status", "pending")
		r.want(t, 0, "kiln_dispatch_queue_depth", "status", "dispatched")
	}
	check("before any refresh", 0)
	if err := r.m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	check("empty queue", 0)
	run := r.queue(t, "linux", "macos")
	if err := r.m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	check("two queued", 2)
	r.want(t, 2, "kiln_jobs", "status", "queued")
	r.want(t, 0, "kiln_jobs", "status", "running")
	if _, err := r.eng.Cancel(ctx, run.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	check("drained", 0)
	// B64 at the gauge: the drained labels report 0.
	r.want(t, 0, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "linux")
	r.want(t, 0, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "macos")
	r.want(t, 2, "kiln_jobs_finished_total", "status", "cancelled")
	r.want(t, 1, "kiln_executions_total", "status", "cancelled")
}

// Two metrics instances in one process keep separate sticky state: the
// rule is per instance, not process-global.
func TestStickyLabelsArePerInstance(t *testing.T) {
	a, b := newRig(t, Config{}), newRig(t, Config{})
	a.queue(t, "gpu")
	ctx := context.Background()
	if err := a.m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	a.want(t, 1, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "gpu")
	if _, ok := b.value(t, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "gpu"); ok {
		t.Fatal("a label seen by one instance appeared in another")
	}
}

// B66: the backpressure warning comes after two refreshes in a row with
// pending ≥ the threshold, once per episode, and a line when it is over.
func TestBackpressureWarnsAfterTwoRefreshes(t *testing.T) {
	r := newRig(t, Config{BackpressureThreshold: 2})
	ctx := context.Background()
	run := r.queue(t, "gpu", "gpu")
	refresh := func() {
		t.Helper()
		if err := r.m.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	refresh()
	if strings.Contains(r.log.String(), "backpressure") {
		t.Fatalf("warned after one refresh: %s", r.log.String())
	}
	refresh()
	refresh()
	if n := strings.Count(r.log.String(), "queue.backpressure.sustained"); n != 1 {
		t.Fatalf("%d warnings after three refreshes, want 1: %s", n, r.log.String())
	}
	if !strings.Contains(r.log.String(), "largest_queue=gpu") {
		t.Fatalf("the warning does not name the largest queue: %s", r.log.String())
	}
	if _, err := r.eng.Cancel(ctx, run.ID, "test"); err != nil {
		t.Fatal(err)
	}
	refresh()
	if !strings.Contains(r.log.String(), "queue backpressure over") {
		t.Fatalf("no line when the backpressure ended: %s", r.log.String())
	}
}

func TestNewNeedsItsDependencies(t *testing.T) {
	if _, err := New(prometheus.NewRegistry(), Deps{}, Config{}); err == nil {
		t.Fatal("New accepted no queue and no run reader")
	}
	r := newRig(t, Config{})
	// A second set of metrics on the same registry is refused, not a panic.
	if _, err := New(r.reg, Deps{Queue: r.db.Queue(), Runs: r.db.Runs()}, Config{}); err == nil {
		t.Fatal("the same metrics registered twice on one registry")
	}
}

// A flood of distinct webhook event names creates one series, not one per
// name; processed outcomes outside the known set are "other".
// Proves B62 (docs/behaviours.md).
func TestWebhookLabelsStayBounded(t *testing.T) {
	r := newRig(t, Config{})
	for i := range 1000 {
		r.m.DeliveryRecorded("gh", fmt.Sprintf("custom_%d", i), false)
	}
	r.m.DeliveryRecorded("gh", "push", true)
	r.m.DeliveryFinished("made_up")
	r.m.DeliveryFinished(kiln.DeliveryIgnored)
	if n := r.series(t, "kiln_webhooks_received_total"); n != 2 {
		t.Fatalf("%d series of kiln_webhooks_received_total, want 2 (other, push)", n)
	}
	r.want(t, 1000, "kiln_webhooks_received_total", "source", "gh", "event", "other")
	r.want(t, 1, "kiln_dedup_hits_total")
	r.want(t, 1, "kiln_webhooks_processed_total", "result", "duplicate")
	r.want(t, 1, "kiln_webhooks_processed_total", "result", "other")
	r.want(t, 1, "kiln_webhooks_processed_total", "result", "ignored")
}
