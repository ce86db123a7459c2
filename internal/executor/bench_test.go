package executor

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countSink counts what it is given and keeps nothing.
type countSink struct{ lines, bytes atomic.Int64 }

func (c *countSink) Step(StepEvent) {}
func (c *countSink) Log(b LogBatch) {
	c.lines.Add(int64(len(b.Lines)))
	n := 0
	for i := range b.Lines {
		n += len(b.Lines[i].Text) + 1
	}
	c.bytes.Add(int64(n))
}

// BenchmarkLogThroughput measures lines per second from a step's stdout to
// LogBatch events: a step prints 1,000,000 lines of 100 bytes and a
// counting Sink receives them.
//
//	go test -bench Log -run '^$' ./internal/executor/
func BenchmarkLogThroughput(b *testing.B) {
	const lines = 1_000_000
	line := strings.Repeat("x", 99)
	for _, nSecrets := range []int{0, 10} {
		b.Run(fmt.Sprintf("secrets=%d", nSecrets), func(b *testing.B) {
			x := newExecutor(b, func(c *Config) {
				c.MaxLogBytesPerStep = 1 << 30
				c.BatchInterval = 100 * time.Millisecond
			})
			secrets := map[string]string{}
			for i := range nSecrets {
				secrets[fmt.Sprint("S", i)] = fmt.Sprintf("secret-value-%02d-abcdef", i)
			}
			job := &Job{JobID: "bench", Secrets: secrets, Steps: []Step{
				{Run: fmt.Sprintf("yes '%s' | head -n %d", line, lines)},
			}}
			b.SetBytes(lines * 100)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				sink := &countSink{}
				res := x.Start(b.Context(), job, sink).Wait()
				if res.Status != "success" || sink.lines.Load() != lines {
					b.Fatalf("result %s, %d lines", res.Status, sink.lines.Load())
				}
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(lines*b.N)/elapsed.Seconds(), "lines/s")
		})
	}
}
