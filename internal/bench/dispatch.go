package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// claimMetric is the server's histogram of claim times.
const claimMetric = "kiln_dispatch_claim_seconds"

// dispatchResult is one dispatch measurement.
type dispatchResult struct {
	jobsPerSec float64
	nextP50    time.Duration // an agent's success sent → its next job received
	nextP99    time.Duration
	claimP50   time.Duration // an agent's claim committed (the server's histogram)
	claimP99   time.Duration
	cpuPerJob  time.Duration // the server's CPU time per job, from run creation to success
}

// dispatch measures no-op jobs through each agent count, first with an
// empty queue, then with as many jobs no agent can take already queued.
func (b *bench) dispatch(ctx context.Context) error {
	raw, err := b.rawLoop(ctx)
	if err != nil {
		return err
	}
	for _, n := range b.cfg.Agents {
		plain, err := b.dispatchOnce(ctx, n, false)
		if err != nil {
			return err
		}
		withBacklog, err := b.dispatchOnce(ctx, n, true)
		if err != nil {
			return err
		}
		var target *Target
		if n == 100 {
			target = b.pick(Target{Value: 3000, AtLeast: true}, Target{Value: 2000, AtLeast: true})
		}
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: no-op jobs", n), plain.jobsPerSec, "jobs/s", target)
		if raw > 0 {
			var rawTarget *Target
			if n == 100 {
				rawTarget = atLeast(1)
			}
			b.add(ScenarioDispatch, fmt.Sprintf("%d agents: no-op jobs / raw SKIP LOCKED loop", n), plain.jobsPerSec/raw, "ratio", rawTarget)
		}
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: server CPU per job", n), float64(plain.cpuPerJob.Microseconds()), "µs", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents, half the queue unmatchable: no-op jobs", n), withBacklog.jobsPerSec, "jobs/s", nil)
		// "No slowdown": within a tenth of the plain number.
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: throughput with backlog / without", n),
			withBacklog.jobsPerSec/plain.jobsPerSec, "ratio", atLeast(0.9))
		var claimTarget *Target
		if n == 1000 {
			claimTarget = atMost(20)
		}
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: claim, p50", n), ms(plain.claimP50), "ms", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: claim, p99", n), ms(plain.claimP99), "ms", claimTarget)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: agent free → next job, p50", n), ms(plain.nextP50), "ms", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: agent free → next job, p99", n), ms(plain.nextP99), "ms", nil)
	}
	return nil
}

// rawWorkers is the raw loop's concurrency: 16 workers, one job per claim.
const rawWorkers = 16

// rawLoop measures, on PostgreSQL, the baseline kiln's dispatch is judged
// against: the same number of jobs through a bare table claimed with FOR
// UPDATE SKIP LOCKED (store.RunRawQueue) on a scratch database of the same
// server. It returns jobs/s, or 0 on SQLite.
func (b *bench) rawLoop(ctx context.Context) (float64, error) {
	if b.dialect != "postgres" {
		return 0, nil
	}
	total := (b.cfg.Jobs + jobsPerRun - 1) / jobsPerRun * jobsPerRun
	u, drop, err := store.ScratchPostgres(ctx, b.cfg.Database, "kiln_bench_raw")
	if err != nil {
		return 0, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = drop(dctx)
		cancel()
	}()
	b.progress("   raw SKIP LOCKED loop: %d jobs, %d workers, one job per claim", total, rawWorkers)
	res, err := store.RunRawQueue(ctx, u, total, rawWorkers)
	if err != nil {
		return 0, err
	}
	v := perSec(res.Jobs, res.Elapsed)
	b.add(ScenarioDispatch, fmt.Sprintf("raw SKIP LOCKED loop (%d workers, 1 job per claim)", rawWorkers), v, "jobs/s", nil)
	return v, nil
}

// dispatchOnce starts a server, connects n agents, optionally queues a
// backlog of unmatchable jobs, then dispatches the no-op runs and times
// them from the first dispatch request to the last success stored.
func (b *bench) dispatchOnce(ctx context.Context, n int, backlog bool) (dispatchResult, error) {
	runs := (b.cfg.Jobs + jobsPerRun - 1) / jobsPerRun
	total := runs * jobsPerRun
	label := "plain"
	if backlog {
		label = fmt.Sprintf("with %d unmatchable jobs queued", total)
	}
	b.progress("   %d agents, %d jobs, %s", n, total, label)
	s, err := b.startStage(ctx, nil)
	if err != nil {
		return dispatchResult{}, err
	}
	defer s.stop()
	if backlog {
		if err := dispatchRuns(ctx, s.serverProc, "backlog.yml", runs); err != nil {
			return dispatchResult{}, err
		}
	}

	var finished atomic.Int64
	allDone := make(chan struct{})
	gaps := &gapRecorder{freed: map[*agent]time.Time{}}
	job := func(a *agent, d *proto.Dispatch, at time.Time) {
		gaps.dispatched(a, at)
		runNoop(a, d, func() { gaps.freedAt(a, time.Now()) }, func() {
			if finished.Add(1) == int64(total) {
				close(allDone)
			}
		})
	}
	agents, err := b.dialAgents(ctx, s.serverProc, s.token, "bench", n, []string{"bench"}, job)
	if err != nil {
		return dispatchResult{}, err
	}
	defer closeAgents(agents)

	cpu0, claims0, err := cpuAndClaims(ctx, s.serverProc)
	if err != nil {
		return dispatchResult{}, err
	}
	t0 := time.Now()
	if err := dispatchRuns(ctx, s.serverProc, "noop.yml", runs); err != nil {
		return dispatchResult{}, err
	}
	if err := b.waitFinished(ctx, s.serverProc, allDone, &finished, total); err != nil {
		return dispatchResult{}, err
	}
	elapsed := time.Since(t0)
	cpu1, claims1, err := cpuAndClaims(ctx, s.serverProc)
	if err != nil {
		return dispatchResult{}, err
	}
	r := dispatchResult{jobsPerSec: perSec(total, elapsed), nextP50: gaps.percentile(0.5), nextP99: gaps.percentile(0.99),
		claimP50: histogramQuantile(claims0, claims1, 0.5), claimP99: histogramQuantile(claims0, claims1, 0.99),
		cpuPerJob: time.Duration((cpu1 - cpu0) * float64(time.Second) / float64(total))}
	b.progress("   %d jobs in %s: %.0f jobs/s", total, elapsed.Round(time.Millisecond), r.jobsPerSec)
	return r, nil
}

// cpuAndClaims reads the server's CPU time and claim histogram from one
// scrape.
func cpuAndClaims(ctx context.Context, s *serverProc) (float64, map[float64]float64, error) {
	sc, err := s.scrape(ctx)
	if err != nil {
		return 0, nil, err
	}
	cpu, err := sc.sum("process_cpu_seconds_total")
	if err != nil {
		return 0, nil, err
	}
	claims, err := sc.buckets(claimMetric)
	return cpu, claims, err
}

// waitFinished waits for every job's success to be stored, reporting
// progress every second.
func (b *bench) waitFinished(ctx context.Context, s *serverProc, done <-chan struct{}, finished *atomic.Int64, total int) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-tick.C:
			b.progress("   %d/%d jobs finished", finished.Load(), total)
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs finished: %w\n%s", finished.Load(), total, ctx.Err(), s.logTail())
		}
	}
}

// gapRecorder measures, per agent, the time from sending a job's success
// (the agent is free) to receiving its next job: what claiming costs an
// agent while work is queued.
type gapRecorder struct {
	mu    sync.Mutex
	freed map[*agent]time.Time
	gaps  []time.Duration
}

func (g *gapRecorder) dispatched(a *agent, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.freed[a]; ok {
		g.gaps = append(g.gaps, max(at.Sub(t), 0))
		delete(g.freed, a)
	}
}

func (g *gapRecorder) freedAt(a *agent, t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.freed[a] = t
}

func (g *gapRecorder) percentile(p float64) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return percentile(g.gaps, p)
}
