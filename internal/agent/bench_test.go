package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/proto"
)

// ackServer is the cheapest orchestrator that keeps an agent sending: it
// registers the agent, dispatches one job, and acknowledges every durable
// frame, reading only the frame's seq (and counting log lines into lines).
// done is closed when the job's final status arrives.
func ackServer(d *proto.Dispatch, done chan<- struct{}, lines *atomic.Int64) *httptest.Server {
	write := func(ctx context.Context, c *websocket.Conn, m proto.Message) {
		out, _ := proto.Encode(0, m)
		c.Write(ctx, websocket.MessageText, out)
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(proto.MaxFrameBytes)
		ctx := r.Context()
		c.Read(ctx) // auth
		write(ctx, c, &proto.AuthOK{ConnectionID: "bench"})
		c.Read(ctx) // register
		write(ctx, c, &proto.RegisterAck{AgentID: "bench"})
		write(ctx, c, d)
		var buf bytes.Buffer
		for {
			_, rd, err := c.Reader(ctx)
			if err != nil {
				return
			}
			buf.Reset()
			if _, err := buf.ReadFrom(rd); err != nil {
				return
			}
			msg := buf.Bytes()
			// {"type":"log","seq":17,"data":…}: the seq is near the front.
			i := bytes.Index(msg[:min(len(msg), 64)], []byte(`"seq":`))
			if i < 0 {
				continue
			}
			j := i + 6
			for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
				j++
			}
			seq, _ := strconv.ParseUint(string(msg[i+6:j]), 10, 64)
			write(ctx, c, &proto.Ack{Seq: seq})
			if bytes.HasPrefix(msg, []byte(`{"type":"log"`)) {
				lines.Add(int64(bytes.Count(msg, []byte(`"stream":"std`))))
			}
			if bytes.HasPrefix(msg, []byte(`{"type":"job.status"`)) && bytes.Contains(msg, []byte(`"status":"success"`)) {
				close(done)
			}
		}
	}))
}

// BenchmarkSendLogs measures the agent's send path for logs: lines handed to
// the Sink in executor-sized batches (50 lines of ~100 bytes), through the
// outbox, encoded and written as frames to a server that acknowledges each.
// "coalesced" lets the outbox merge batches while the writer is busy (what
// happens under load); "50-line frames" sends every batch as its own frame.
func BenchmarkSendLogs(b *testing.B) {
	for _, bc := range []struct {
		name     string
		maxLines int
	}{{"coalesced", 0}, {"50-line frames", 50}} {
		b.Run(bc.name, func(b *testing.B) { benchSendLogs(b, bc.maxLines) })
	}
}

func benchSendLogs(b *testing.B, maxLines int) {
	runner := &benchRunner{lines: b.N}
	done := make(chan struct{})
	var lines atomic.Int64
	srv := ackServer(dispatch("bench-1", 1, "bench"), done, &lines)
	defer srv.Close()
	cfg := Config{
		Server: srv.URL, Token: "kat_bench", ID: "bench", Runner: runner, MaxFrameLines: maxLines,
		BufferFrames:      max(DefaultBufferFrames, b.N/50+100), // the producer is not throttled
		HeartbeatInterval: time.Hour, JobHeartbeatInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		b.Fatal(err)
	}
	a, err := newAgent(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { ended <- a.run(ctx) }()
	<-done
	elapsed := time.Since(start)
	b.StopTimer()
	a.out.mu.Lock()
	dropped := a.out.dropped
	a.out.mu.Unlock()
	if dropped > 0 { // a dropped line would flatter the number
		b.Fatalf("%d lines dropped", dropped)
	}
	if n := lines.Load(); n != int64(b.N) {
		b.Fatalf("the server got %d lines of %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "lines/s")
	stop()
	<-ended
}

// benchRunner's one job reports `lines` log lines in batches of 50.
type benchRunner struct{ lines int }

func (r *benchRunner) Prepare(*proto.Dispatch) (Prepared, error) { return r, nil }

func (r *benchRunner) Start(_ context.Context, sink Sink) Execution {
	x := &fakeExec{done: make(chan struct{}), res: Result{Status: "success"}}
	go func() {
		defer close(x.done)
		text := "2026-01-02T15:04:05Z INFO compiling github.com/kilnci/kiln/internal/agent: object file written, line "
		for seq := 1; seq <= r.lines; {
			n := min(50, r.lines-seq+1)
			batch := make([]proto.LogLine, n)
			for i := range batch {
				batch[i] = proto.LogLine{Seq: uint64(seq + i), Stream: proto.StreamStdout, Text: text, TimeMS: 1767366245000}
			}
			sink.Log(0, batch)
			seq += n
		}
	}()
	return x
}

// BenchmarkExecutorJobLogs is the agent end to end: a real step printing
// b.N lines of ~100 bytes, read by the executor, sent by the agent to a
// server that acknowledges each frame.
func BenchmarkExecutorJobLogs(b *testing.B) {
	done := make(chan struct{})
	d := dispatch("bench-1", 1, `awk 'BEGIN { for (i = 1; i <= `+strconv.Itoa(b.N)+
		`; i++) printf "%d 2026-01-02T15:04:05Z INFO compiling github.com/kilnci/kiln/internal/agent: object file written\n", i }'`)
	var lines atomic.Int64
	srv := ackServer(d, done, &lines)
	defer srv.Close()
	cfg := Config{
		Server: srv.URL, Token: "kat_bench", ID: "bench",
		BufferFrames:      max(DefaultBufferFrames, b.N/50+100),
		HeartbeatInterval: time.Hour, JobHeartbeatInterval: time.Hour,
		Executor: executor.Config{WorkRoot: b.TempDir(), BaseEnv: []string{"PATH=/usr/bin:/bin"}, MaxLogBytesPerStep: 1 << 40},
		Logger:   slog.New(slog.DiscardHandler),
	}
	ctx, stop := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { ended <- Run(ctx, cfg) }()
	<-done
	elapsed := time.Since(start)
	b.StopTimer()
	if n := lines.Load(); n != int64(b.N) {
		b.Fatalf("the server got %d lines of %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "lines/s")
	stop()
	<-ended
}
