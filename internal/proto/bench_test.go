package proto

import (
	"strings"
	"testing"
	"time"
)

func logFrame(b testing.TB, lines int) []byte {
	m := &Log{JobID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", LeaseEpoch: 1, Step: 2}
	now := time.Now()
	for i := 0; i < lines; i++ {
		m.Lines = append(m.Lines, LogLine{Seq: uint64(i + 1), Stream: StreamStdout, Text: strings.Repeat("x", 100), TimeMS: now.UnixMilli()})
	}
	f, err := Encode(1, m)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkDecodeLog50 measures the orchestrator's cost per log frame of 50
// 100-byte lines, the agent's default batch; lines/s = 50 / (ns/op) · 1e9.
func BenchmarkDecodeLog50(b *testing.B) {
	f := logFrame(b, 50)
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(50*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

func BenchmarkEncodeLog50(b *testing.B) {
	m := &Log{JobID: "j", LeaseEpoch: 1, Step: 0}
	now := time.Now()
	for i := 0; i < 50; i++ {
		m.Lines = append(m.Lines, LogLine{Seq: uint64(i + 1), Stream: StreamStdout, Text: strings.Repeat("x", 100), TimeMS: now.UnixMilli()})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(1, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(50*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkEncodeJobStatus is a job's success frame, the one every job
// sends: once through Encode, once through a reused Encoder.
func BenchmarkEncodeJobStatus(b *testing.B) {
	m := &JobStatus{JobID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", LeaseEpoch: 1, Status: "success", Time: time.Now()}
	b.Run("Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Encode(3, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Encoder", func(b *testing.B) {
		enc := NewEncoder()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := enc.Encode(3, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
