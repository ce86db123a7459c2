package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// BenchmarkLogHistory reads a 10,000-line step log through the API and the
// client (NDJSON over loopback HTTP).
func BenchmarkLogHistory(b *testing.B) {
	h := apitest.New(b, storetest.New(b, storetest.ReleaseWith(engine.Release)))
	h.Dispatch(b)
	l := h.Claim(b, "agent-1")
	const n = 10000
	for start := 1; start <= n; start += 1000 {
		texts := make([]string, 1000)
		for i := range texts {
			texts[i] = fmt.Sprintf("line %d: the quick brown fox jumps over the lazy dog", start+i)
		}
		h.Log(b, l, 0, uint64(start), texts...)
	}
	b.ResetTimer()
	for b.Loop() {
		got := 0
		if err := h.Client.Logs(ctx, "1", api.LogQuery{Job: "build"}, func(api.LogLine) error { got++; return nil }); err != nil || got != n {
			b.Fatalf("%d lines, %v", got, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkLogFollow appends batches of 100 lines while a client follows
// the job, and waits for each batch to reach the client: the live path
// agent → log store → API → viewer.
// Proves B83 (docs/behaviours.md).
func BenchmarkLogFollow(b *testing.B) {
	h := apitest.New(b, storetest.New(b, storetest.ReleaseWith(engine.Release)))
	h.Dispatch(b)
	l := h.Claim(b, "agent-1")
	got := make(chan api.LogLine, 1024)
	done := make(chan error, 1)
	go func() {
		done <- h.Client.FollowLogs(ctx, "1", "build", func(line api.LogLine) error { got <- line; return nil })
	}()
	h.Log(b, l, 0, 1, "hello")
	<-got // subscribed
	const per = 100
	texts := make([]string, per)
	for i := range texts {
		texts[i] = "the quick brown fox jumps over the lazy dog"
	}
	seq := uint64(2)
	var worst time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		h.Log(b, l, 0, seq, texts...)
		for range per {
			<-got
		}
		seq += per
		worst = max(worst, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(per*b.N)/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(float64(worst.Microseconds()), "worst-batch-µs")
	h.Finish(b, l, kiln.JobSuccess)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
