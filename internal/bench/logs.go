package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/proto"
)

// logWindow is how many log frames an agent keeps unacknowledged: the
// real agent's outbox does the same, so a slow store slows the sender
// rather than growing memory.
const logWindow = 64

// logStepLines is how many lines a log job writes into one step before it
// starts the next: 9 MB at logLineBytes, under the 10 MiB a step's log
// keeps (logstore.DefaultMaxStepBytes; more is truncated).
const logStepLines = 90_000

// logs measures log lines from agents through the server's store to live
// viewers, one following each job (GET /runs/{run}/logs?job=…&follow):
// one agent alone, then cfg.LogAgents at once.
func (b *bench) logs(ctx context.Context) error {
	files := map[string]string{".kiln/workflows/logs-1.yml": logWorkflow(1),
		fmt.Sprintf(".kiln/workflows/logs-%d.yml", b.cfg.LogAgents): logWorkflow(b.cfg.LogAgents)}
	s, err := b.startStage(ctx, files)
	if err != nil {
		return err
	}
	defer s.stop()
	lr := &logRun{lines: b.cfg.LogLines}
	agents, err := b.dialAgents(ctx, s.serverProc, s.token, "logger", b.cfg.LogAgents, []string{"logs"}, lr.job)
	if err != nil {
		return err
	}
	defer closeAgents(agents)

	counts := []int{1}
	if b.cfg.LogAgents > 1 {
		counts = append(counts, b.cfg.LogAgents)
	}
	// Throughput: every agent sends as fast as the server acknowledges.
	for _, n := range counts {
		m, err := b.logRound(ctx, s.serverProc, lr, n, 0)
		if err != nil {
			return err
		}
		what, target := "1 agent", atLeast(200_000)
		if n > 1 {
			what, target = fmt.Sprintf("%d agents", n), atLeast(1_000_000)
		}
		b.add(ScenarioLogs, what+", flat out: lines stored", m.storedPerSec, "lines/s", target)
		b.add(ScenarioLogs, what+", flat out: lines at the live viewers", m.viewedPerSec, "lines/s", nil)
		// Independent of what else the machine runs (the bench's agents
		// and viewers share it): lines one server core can take.
		b.add(ScenarioLogs, what+", flat out: lines per server CPU-second", 1/m.serverCPUPerLine.Seconds(), "lines/s", nil)
	}
	// Latency: the agents send at the target rate (200,000 lines/s from
	// one agent, 1,000,000 in all), where queues are not full by design.
	for _, n := range counts {
		rate := 200_000
		if n > 1 {
			rate = 1_000_000 / n
		}
		m, err := b.logRound(ctx, s.serverProc, lr, n, rate)
		if err != nil {
			return err
		}
		b.add(ScenarioLogs, fmt.Sprintf("%d× %s lines/s: line sent → at its viewer, p99", n, groupThousands(int64(rate))),
			ms(m.latencyP99), "ms", atMost(250))
	}
	return nil
}

func logWorkflow(n int) string {
	idx := make([]string, n)
	for i := range idx {
		idx[i] = strconv.Itoa(i)
	}
	return fmt.Sprintf(`name: logs-%d
on: dispatch
jobs:
  log:
    runs_on: [logs]
    matrix:
      i: [%s]
    steps:
      - run: "true"
`, n, strings.Join(idx, ", "))
}

// logMeasure is one logRound's numbers.
type logMeasure struct {
	storedPerSec, viewedPerSec float64
	latencyP99                 time.Duration
	serverCPUPerLine           time.Duration // the server's CPU time per line, viewers included
}

// logRound dispatches the n-job log workflow and follows its log until
// the run ends.
func (b *bench) logRound(ctx context.Context, s *serverProc, lr *logRun, n, rate int) (logMeasure, error) {
	cpu0, err := s.metric(ctx, "process_cpu_seconds_total")
	if err != nil {
		return logMeasure{}, err
	}
	round := &logRound{viewing: make(chan struct{}), rate: rate}
	round.waiting.Store(int64(n))
	lr.cur.Store(round)
	d, err := s.client.Dispatch(ctx, api.DispatchRequest{Source: benchSource, Repository: benchRepo, Ref: "main", Workflow: fmt.Sprintf("logs-%d.yml", n)}, true)
	if err != nil {
		return logMeasure{}, err
	}
	if len(d.RunIDs) != 1 {
		return logMeasure{}, fmt.Errorf("the log workflow's dispatch started %d runs: %s %s", len(d.RunIDs), d.Status, d.Message)
	}
	viewers, err := follow(ctx, s, d.RunIDs[0], round, n)
	if err != nil {
		return logMeasure{}, err
	}
	var seen int64
	var lastSeen time.Time
	var latency []time.Duration
	for _, v := range viewers {
		seen += v.lines
		if v.lastSeen.After(lastSeen) {
			lastSeen = v.lastSeen
		}
		latency = append(latency, v.latency...)
	}
	want := int64(n) * int64(b.cfg.LogLines+1)
	if seen != want {
		return logMeasure{}, fmt.Errorf("the viewers got %d lines, want %d", seen, want)
	}
	run, err := s.client.GetRun(ctx, d.RunIDs[0])
	if err != nil {
		return logMeasure{}, err
	}
	if run.Status != kiln.RunSuccess {
		return logMeasure{}, fmt.Errorf("the log run ended %s, want success", run.Status)
	}
	first := time.Unix(0, round.firstSent.Load())
	stored := time.Unix(0, round.lastAcked.Load()).Sub(first)
	viewed := lastSeen.Sub(first)
	lines := n * b.cfg.LogLines
	cpu1, err := s.metric(ctx, "process_cpu_seconds_total")
	if err != nil {
		return logMeasure{}, err
	}
	b.progress("   %d agents × %d lines (%s): stored in %s, at the viewers in %s", n, b.cfg.LogLines, pace(rate),
		stored.Round(time.Millisecond), viewed.Round(time.Millisecond))
	return logMeasure{storedPerSec: perSec(lines, stored), viewedPerSec: perSec(lines, viewed), latencyP99: percentile(latency, 0.99),
		serverCPUPerLine: time.Duration((cpu1 - cpu0) * float64(time.Second) / float64(lines))}, nil
}

// follow runs one viewer per job of the run, as the people watching a
// fleet's jobs would, until every job finished.
func follow(ctx context.Context, s *serverProc, runID string, round *logRound, n int) ([]*viewer, error) {
	run, err := s.client.GetRun(ctx, runID) // created with all its jobs at once
	if err != nil {
		return nil, err
	}
	if len(run.Jobs) != n {
		return nil, fmt.Errorf("the log run has %d jobs, want %d", len(run.Jobs), n)
	}
	viewers := make([]*viewer, n)
	errs := make(chan error, n)
	for i := range viewers {
		viewers[i] = &viewer{round: round}
		go func() {
			errs <- s.client.LogsRaw(ctx, runID, api.LogQuery{Job: run.Jobs[i].ID, Follow: true}, viewers[i].line)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return nil, fmt.Errorf("follow the log: %w", err)
		}
	}
	return viewers, nil
}

// logRun is the job the log agents run. Each round, every job first sends
// a hello line and waits until the viewer has seen one (its follow is
// live), then sends its lines as fast as the window of unacknowledged
// frames allows.
type logRun struct {
	lines int
	cur   atomic.Pointer[logRound]
}

// logRound is one round's shared state.
type logRound struct {
	rate      int           // lines per second per agent; 0: as fast as acknowledged
	viewing   chan struct{} // closed when every viewer saw its job's hello
	waiting   atomic.Int64  // viewers yet to see it
	firstSent atomic.Int64  // unix ns of the first data frame sent
	lastAcked atomic.Int64  // unix ns of the last job's success stored
}

func (r *logRound) seen() {
	if r.waiting.Add(-1) == 0 {
		close(r.viewing)
	}
}

func (r *logRun) job(a *agent, d *proto.Dispatch, _ time.Time) {
	ctx := context.Background()
	round := r.cur.Load()
	if a.start(ctx, d) != nil {
		return
	}
	m := &proto.Log{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Step: 0, Lines: make([]proto.LogLine, 0, logFrameLines)}
	m.Lines = append(m.Lines, proto.LogLine{Seq: 1, Stream: proto.StreamStdout, Text: "hello", TimeMS: time.Now().UnixMilli()})
	if a.send(ctx, m) != nil {
		return
	}
	<-round.viewing
	pad := strings.Repeat("x", logLineBytes-len("t=0000000000000000000 "))
	seq := uint64(1)
	var interval time.Duration // between frames, when paced
	if round.rate > 0 {
		interval = time.Duration(float64(time.Second) * logFrameLines / float64(round.rate))
	}
	start := time.Now()
	for sent, frame := 0, 0; sent < r.lines; frame++ {
		if interval > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(frame) * interval)))
		}
		if seq >= logStepLines { // the step is full: the next one starts
			m.Step++
			seq = 0
		}
		m.Lines = m.Lines[:0]
		now := time.Now()
		round.firstSent.CompareAndSwap(0, now.UnixNano())
		text := fmt.Sprintf("t=%019d %s", now.UnixNano(), pad)
		for i := 0; i < logFrameLines && sent < r.lines && seq < logStepLines; i++ {
			seq++
			sent++
			m.Lines = append(m.Lines, proto.LogLine{Seq: seq, Stream: proto.StreamStdout, Text: text, TimeMS: now.UnixMilli()})
		}
		last, err := a.sendSeq(ctx, m)
		if err != nil {
			return
		}
		if last > logWindow && a.waitAcked(ctx, last-logWindow) != nil {
			return
		}
	}
	_ = a.sendThen(ctx, &proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobSuccess, Time: time.Now()},
		func() { round.lastAcked.Store(time.Now().UnixNano()) })
}

// viewer follows a job's log: it counts lines and samples, once per
// frame's worth of lines, how long a line took from its agent to here. It
// reads each line raw, as a browser would take it, and decodes only the
// sampled ones: decoding every line cost the bench process ~0.4 of the two
// cores it shares with the server (bench.md, thirteenth pass).
type viewer struct {
	round    *logRound
	lines    int64
	lastSeen time.Time
	latency  []time.Duration
}

var errBadLine = errors.New("a log line without the bench's timestamp")

// benchText is how a sampled line's text starts on the wire.
var benchText = []byte(`"text":"t=`)

func (v *viewer) line(raw []byte) error {
	now := time.Now()
	v.lines++
	v.lastSeen = now
	if v.lines == 1 { // the job's hello: its follow is live
		v.round.seen()
		return nil
	}
	if (v.lines-2)%logFrameLines != 0 {
		return nil
	}
	i := bytes.Index(raw, benchText)
	if i < 0 || len(raw) < i+len(benchText)+19 {
		return errBadLine
	}
	ns, err := strconv.ParseInt(string(raw[i+len(benchText):i+len(benchText)+19]), 10, 64)
	if err != nil {
		return errBadLine
	}
	v.latency = append(v.latency, now.Sub(time.Unix(0, ns)))
	return nil
}

func pace(rate int) string {
	if rate == 0 {
		return "flat out"
	}
	return groupThousands(int64(rate)) + " lines/s each"
}
