package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Applied runs on the fleet's commit loop for every batch: it must cost
// next to nothing.
func BenchmarkApplied(b *testing.B) {
	r := newRig(b, Config{})
	eff := store.Effects{Runs: []store.RunChange{{ID: "r", Status: kiln.RunRunning}}}
	for i := range 8 {
		eff.Finished = append(eff.Finished, store.JobRef{ID: fmt.Sprint(i), Status: kiln.JobSuccess})
	}
	b.ReportAllocs()
	for b.Loop() {
		r.m.Applied(eff)
	}
}

// A scrape of every series with 200 queue labels (sticky) and 50 sources.
func BenchmarkScrape(b *testing.B) {
	r := newRig(b, Config{})
	byLabel := map[string]int{}
	for i := range 200 {
		byLabel[fmt.Sprintf("label-%d", i)] = i
	}
	for l, n := range applyStickyQueueLabels(r.m.everSeen, byLabel) {
		r.m.queueByLabel.WithLabelValues(statusPending, l).Set(float64(n))
	}
	for i := range 50 {
		r.m.DeliveryRecorded(fmt.Sprintf("source-%d", i), "push", false)
	}
	h := r.m.Handler()
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
		io.Copy(io.Discard, w.Body)
	}
}

// One refresh of the queue gauges over a real SQLite store with 500
// queued jobs on 50 labels.
func BenchmarkRefresh(b *testing.B) {
	r := newRig(b, Config{})
	for i := range 50 {
		labels := make([]string, 10)
		for j := range labels {
			labels[j] = fmt.Sprintf("l%d", i)
		}
		r.queue(b, labels...)
	}
	ctx := context.Background()
	for b.Loop() {
		if err := r.m.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
