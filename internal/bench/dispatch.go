package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	// benchCPUPerJob is the bench process's own (its agents', mostly) over
	// the same window, or negative where it cannot be read: on one machine
	// the load generator's share is CPU the server did not have.
	benchCPUPerJob time.Duration
}

// dispatch measures no-op jobs through each agent count, first with an
// empty queue, then with as many jobs no agent can take already queued.
func (b *bench) dispatch(ctx context.Context) error {
	raw, err := b.rawLoop(ctx)
	if err != nil {
		return err
	}
	for _, n := range b.cfg.Agents {
		plain, err := b.dispatchOnce(ctx, n, false, 0)
		if err != nil {
			return err
		}
		withBacklog, err := b.dispatchOnce(ctx, n, true, 0)
		if err != nil {
			return err
		}
		paced, err := b.dispatchOnce(ctx, n, false, halfLoad(n, plain.jobsPerSec))
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
		if plain.benchCPUPerJob >= 0 {
			b.add(ScenarioDispatch, fmt.Sprintf("%d agents: the bench's own CPU per job (its agents)", n),
				float64(plain.benchCPUPerJob.Microseconds()), "µs", nil)
		}
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents, half the queue unmatchable: no-op jobs", n), withBacklog.jobsPerSec, "jobs/s", nil)
		// "No slowdown": within a tenth of the plain number.
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: throughput with backlog / without", n),
			withBacklog.jobsPerSec/plain.jobsPerSec, "ratio", atLeast(0.9))
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents, saturated: claim, p50", n), ms(plain.claimP50), "ms", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents, saturated: claim, p99", n), ms(plain.claimP99), "ms", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: agent free → next job, p50", n), ms(plain.nextP50), "ms", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents: agent free → next job, p99", n), ms(plain.nextP99), "ms", nil)
		var claimTarget *Target
		if n == 1000 {
			claimTarget = atMost(20)
		}
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents at half the no-op rate: jobs", n), paced.jobsPerSec, "jobs/s", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents at half the no-op rate: claim, p50", n), ms(paced.claimP50), "ms", nil)
		b.add(ScenarioDispatch, fmt.Sprintf("%d agents at half the no-op rate: claim, p99", n), ms(paced.claimP99), "ms", claimTarget)
	}
	return nil
}

// halfLoad is how long each of n agents' jobs must run for them to ask for
// work at half the rate they saturate the server with no-op jobs. A
// claim's time is judged there: at saturation every agent's report waits
// behind the others' in the committer (Little's law: 1,000 agents at 5,000
// jobs/s turn over every 200 ms, whatever a claim costs), which measures
// how full the queue is rather than what a claim takes.
func halfLoad(n int, noopPerSec float64) time.Duration {
	if noopPerSec <= 0 {
		return 0
	}
	return time.Duration(float64(n) / (noopPerSec / 2) * float64(time.Second))
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
// backlog of unmatchable jobs, then dispatches the runs and times them from
// the first dispatch request to the last success stored. Each job runs for
// hold (0: a no-op).
func (b *bench) dispatchOnce(ctx context.Context, n int, backlog bool, hold time.Duration) (dispatchResult, error) {
	runs := (b.cfg.Jobs + jobsPerRun - 1) / jobsPerRun
	total := runs * jobsPerRun
	label := "plain"
	switch {
	case backlog:
		label = fmt.Sprintf("with %d unmatchable jobs queued", total)
	case hold > 0:
		label = fmt.Sprintf("each running %s (half the no-op rate)", hold.Round(time.Millisecond))
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
	allDone, firstWave := make(chan struct{}), make(chan struct{})
	gaps := &gapRecorder{freed: map[*agent]time.Time{}}
	job := func(a *agent, d *proto.Dispatch, at time.Time) {
		gaps.dispatched(a, at)
		runFor(a, d, spread(hold), func() { gaps.freedAt(a, time.Now()) }, func() {
			k := finished.Add(1)
			if k == int64(min(n, total)) {
				close(firstWave)
			}
			if k == int64(total) {
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
	t0, self0 := time.Now(), selfCPU()
	if err := dispatchRuns(ctx, s.serverProc, "noop.yml", runs); err != nil {
		return dispatchResult{}, err
	}
	// Jobs that run for a while are timed from the end of the first wave
	// (as many jobs as agents): the steady state of a busy fleet, not the
	// moment every agent was idle and the queue filled at once.
	if hold > 0 && n < total {
		select {
		case <-firstWave:
		case <-ctx.Done():
			return dispatchResult{}, ctx.Err()
		}
		if _, claims0, err = cpuAndClaims(ctx, s.serverProc); err != nil {
			return dispatchResult{}, err
		}
	}
	if err := b.waitFinished(ctx, s.serverProc, allDone, &finished, total); err != nil {
		return dispatchResult{}, err
	}
	elapsed, self1 := time.Since(t0), selfCPU()
	cpu1, claims1, err := cpuAndClaims(ctx, s.serverProc)
	if err != nil {
		return dispatchResult{}, err
	}
	r := dispatchResult{jobsPerSec: perSec(total, elapsed), nextP50: gaps.percentile(0.5), nextP99: gaps.percentile(0.99),
		claimP50: histogramQuantile(claims0, claims1, 0.5), claimP99: histogramQuantile(claims0, claims1, 0.99),
		cpuPerJob: time.Duration((cpu1 - cpu0) * float64(time.Second) / float64(total)), benchCPUPerJob: -1}
	if self0 >= 0 && self1 >= 0 {
		r.benchCPUPerJob = (self1 - self0) / time.Duration(total)
	}
	b.progress("   %d jobs in %s: %.0f jobs/s", total, elapsed.Round(time.Millisecond), r.jobsPerSec)
	return r, nil
}

// spread is a job's run time around a mean of hold, uniform over
// [hold/2, 3·hold/2]: agents that all got their first job at once then
// ask for their next ones spread out, as a fleet's do.
func spread(hold time.Duration) time.Duration {
	if hold <= 0 {
		return 0
	}
	return hold/2 + rand.N(hold)
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
