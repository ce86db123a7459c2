package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The dispatch benchmarks: simulated agents claim no-op jobs one at a time
// and hand their completions to completers that commit them in batches, as
// the fleet does. Reported: jobs/s (claim + complete), and claim latency
// p50/p99 in ms, including the wait for a connection.
//
//	go test -run '^$' -bench . -benchtime 4000x ./internal/store/
//
// backlog=100000 adds 100,000 queued jobs requiring a label no agent has;
// work=D runs give each job 0.5–1.5 × D of "work", so 1,000 agents offer
// about 1,000/D jobs/s and the claim latency is measured below saturation.

type scenario struct {
	agents  int
	batch   int           // completions per transaction
	backlog bool          // 100k unmatchable queued jobs
	work    time.Duration // simulated job duration
}

func (s scenario) String() string {
	name := fmt.Sprintf("agents=%d/batch=%d", s.agents, s.batch)
	if s.backlog {
		name += "/backlog=100000"
	}
	if s.work > 0 {
		name += "/work=" + s.work.String()
	}
	return name
}

var scenarios = []scenario{
	{agents: 10, batch: 10},
	{agents: 100, batch: 1},
	{agents: 100, batch: 10},
	{agents: 100, batch: 50},
	{agents: 1000, batch: 10},
	{agents: 100, batch: 10, backlog: true},
	{agents: 1000, batch: 10, backlog: true},
	{agents: 1000, batch: 10, work: 400 * time.Millisecond},
	{agents: 1000, batch: 10, work: time.Second},
}

const backlogSize = 100_000

// Proves B82 (docs/behaviours.md).
func BenchmarkDispatch(b *testing.B) {
	for _, be := range storetest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			db, err := store.Open(ctx, store.Config{URL: be.URL(b), MaxConns: 16, Releaser: storetest.QueueAsCreated})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			backlog := false
			for _, sc := range scenarios {
				b.Run(sc.String(), func(b *testing.B) {
					if sc.backlog && !backlog {
						b.StopTimer()
						enqueueBacklog(b, db)
						backlog = true
					}
					benchDispatch(b, db, sc)
				})
			}
		})
	}
}

// benchDB opens a database on be for a benchmark, closed when it ends.
func benchDB(b *testing.B, be storetest.Backend) *store.DB {
	b.Helper()
	db, err := store.Open(ctx, store.Config{URL: be.URL(b), Releaser: storetest.QueueAsCreated})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// enqueueBacklog queues backlogSize jobs no benchmark agent accepts.
func enqueueBacklog(b *testing.B, db *store.DB) {
	b.Helper()
	start := time.Now()
	enqueueUnmatchable(b, db, backlogSize/1000, 1000)
	b.Logf("queued %d unmatchable jobs in %v", backlogSize, time.Since(start).Round(time.Millisecond))
}

// enqueueUnmatchable queues runs of size jobs no benchmark agent accepts.
func enqueueUnmatchable(b *testing.B, db *store.DB, runs, size int) {
	b.Helper()
	req := kiln.Requirement{RunsOn: kiln.NewLabels("linux", "sparc")}
	for range runs {
		jobs := make([]store.NewJob, size)
		for i := range jobs {
			jobs[i] = store.NewJob{Name: fmt.Sprintf("sparc %d", i), Requirement: req}
		}
		if _, err := db.Runs().Create(ctx, newRun(jobs...)); err != nil {
			b.Fatal(err)
		}
	}
}

// enqueue queues n jobs the agents accept, in runs of 10.
func enqueue(b *testing.B, db *store.DB, n int) {
	b.Helper()
	for done := 0; done < n; done += 10 {
		jobs := make([]store.NewJob, min(10, n-done))
		for i := range jobs {
			jobs[i] = store.NewJob{Name: fmt.Sprintf("j%d", i), Requirement: linuxReq()}
		}
		if _, err := db.Runs().Create(ctx, newRun(jobs...)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDispatch(b *testing.B, db *store.DB, sc scenario) {
	enqueue(b, db, b.N)
	completions := make(chan store.Completion, sc.agents)
	var claimed atomic.Int64
	lat := make([][]time.Duration, sc.agents)
	var failed atomic.Value
	fail := func(err error) { failed.CompareAndSwap(nil, err) }

	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	var completers sync.WaitGroup
	for range min(sc.agents, 8) {
		completers.Add(1)
		go func() {
			defer completers.Done()
			completeBatches(db, completions, sc.batch, fail)
		}()
	}
	var agents sync.WaitGroup
	for a := range sc.agents {
		agents.Add(1)
		go func() {
			defer agents.Done()
			id := fmt.Sprintf("agent-%d", a)
			if sc.work > 0 {
				// Agents come online spread over one job duration, as
				// they would be in steady state.
				time.Sleep(rand.N(sc.work))
			}
			for claimed.Load() < int64(b.N) && failed.Load() == nil {
				t0 := time.Now()
				cs, err := db.Queue().Claim(ctx, id, linux, 1)
				if err != nil {
					fail(err)
					return
				}
				if len(cs) == 0 {
					time.Sleep(time.Millisecond) // the tail: others hold the last jobs
					continue
				}
				lat[a] = append(lat[a], time.Since(t0))
				claimed.Add(1)
				if sc.work > 0 {
					// Jobs last 0.5–1.5 × work, so agents do not move in
					// lockstep after the first burst.
					time.Sleep(sc.work/2 + rand.N(sc.work))
				}
				completions <- store.Completion{Lease: lease(cs[0]), Status: kiln.JobSuccess}
			}
		}()
	}
	agents.Wait()
	close(completions)
	completers.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	reportLatency(b, lat, elapsed)
	// CPU time of this process per job: on a shared machine, a measure of
	// cost that other processes' load does not distort (for SQLite it is
	// all of the store's work; PostgreSQL's server runs elsewhere).
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
	if d, err := db.Queue().Depth(ctx); err != nil || d.ByStatus[kiln.JobDispatched] != 0 {
		b.Fatalf("dispatched jobs left over: %v %v", d.ByStatus, err)
	}
}

// completeBatches commits completions in batches of up to n: it takes what
// has arrived, without waiting for a full batch.
func completeBatches(db *store.DB, in <-chan store.Completion, n int, fail func(error)) {
	for c := range in {
		batch := []store.Completion{c}
	fill:
		for len(batch) < n {
			select {
			case c, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, c)
			default:
				break fill
			}
		}
		errs, _, err := db.Jobs().CompleteBatch(ctx, batch)
		if err != nil {
			fail(err)
			return
		}
		for _, e := range errs {
			if e != nil {
				fail(e)
				return
			}
		}
	}
}

func reportLatency(b *testing.B, lat [][]time.Duration, elapsed time.Duration) {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	q := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(q(0.50), "claim-p50-ms")
	b.ReportMetric(q(0.99), "claim-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRawSkipLocked is the baseline: a bare SKIP LOCKED claim and a
// complete, each its own transaction, on the same PostgreSQL server, with
// the queue table reduced to what the statement touches.
// Proves B82 (docs/behaviours.md).
func BenchmarkRawSkipLocked(b *testing.B) {
	url := storetest.PostgresURL(b)
	for _, agents := range []int{10, 100} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			db, err := store.Open(ctx, store.Config{URL: url, MaxConns: 16, Releaser: storetest.QueueAsCreated})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			raw := db.SQL()
			mustExec(b, raw, `DROP TABLE IF EXISTS raw_jobs`)
			mustExec(b, raw, `CREATE TABLE raw_jobs (id BIGSERIAL PRIMARY KEY, state INT NOT NULL DEFAULT 0, agent TEXT, started_at TIMESTAMPTZ)`)
			mustExec(b, raw, `CREATE INDEX raw_pending ON raw_jobs (id) WHERE state = 0`)
			mustExec(b, raw, fmt.Sprintf(`INSERT INTO raw_jobs (state) SELECT 0 FROM generate_series(1, %d)`, b.N))
			lat := make([][]time.Duration, agents)
			var claimed atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for a := range agents {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for claimed.Load() < int64(b.N) {
						t0 := time.Now()
						var id int64
						err := raw.QueryRowContext(ctx, `UPDATE raw_jobs SET state = 1, agent = $1, started_at = now()
							WHERE id = (SELECT id FROM raw_jobs WHERE state = 0 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
							RETURNING id`, fmt.Sprint(a)).Scan(&id)
						if err == sql.ErrNoRows {
							time.Sleep(time.Millisecond)
							continue
						}
						if err != nil {
							b.Error(err)
							return
						}
						lat[a] = append(lat[a], time.Since(t0))
						claimed.Add(1)
						if _, err := raw.ExecContext(context.Background(), `UPDATE raw_jobs SET state = 2 WHERE id = $1`, id); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			reportLatency(b, lat, elapsed)
		})
	}
}

// cpuTime is the user and system CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mustExec(b *testing.B, db *sql.DB, q string) {
	b.Helper()
	if _, err := db.Exec(q); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreateRun creates runs of 256 jobs of two steps, each job with
// a spec of about 900 bytes (as kiln bench's workflow renders), and
// reports the store's work per job:
//
//	go test -run '^$' -bench CreateRun -benchmem ./internal/store/
func BenchmarkCreateRun(b *testing.B) {
	spec := []byte(`{"steps":[{"name":"checkout"},{"name":"build","run":"` + strings.Repeat("x", 850) + `"}]}`)
	jobs := make([]store.NewJob, 256)
	for i := range jobs {
		jobs[i] = store.NewJob{Name: fmt.Sprintf("j%d", i), Requirement: linuxReq(), Steps: []string{"checkout", "build"}, Spec: spec}
	}
	for _, be := range storetest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			db := benchDB(b, be)
			b.ResetTimer()
			for range b.N {
				if _, err := db.Runs().Create(ctx, newRun(jobs...)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(jobs)), "µs/job")
		})
	}
}

// BenchmarkSweepUnroutable times the leader's unroutable sweep, once a
// second in a server, with 10,240 queued jobs of a key no agent accepts
// and a grace none of them has reached: the sweep's cost must not grow
// with the jobs waiting.
func BenchmarkSweepUnroutable(b *testing.B) {
	for _, be := range storetest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			db := benchDB(b, be)
			enqueueUnmatchable(b, db, 10, 1024)
			lost, err := db.Queue().Keys(ctx)
			if err != nil || len(lost) != 1 {
				b.Fatalf("keys %v: %v", lost, err)
			}
			msg := func(kiln.Requirement) string { return "unroutable" }
			b.ResetTimer()
			for range b.N {
				res, err := db.Queue().SweepUnroutable(ctx, lost, time.Hour, msg)
				if err != nil || len(res.Jobs) != 0 {
					b.Fatalf("sweep ended %d jobs: %v", len(res.Jobs), err)
				}
			}
		})
	}
}

// benchCommitted runs round(tx, r) in one transaction per round on each
// backend, each round handling batch jobs of the jobs setup prepared (it
// is given the database and the number of rounds), and reports the time
// per job, the commit included.
func benchCommitted(b *testing.B, batch int, setup func(db *store.DB, rounds int), round func(tx *store.Tx, r int) error) {
	for _, be := range storetest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			db := benchDB(b, be)
			rounds := (b.N + batch - 1) / batch
			enqueue(b, db, rounds*batch)
			setup(db, rounds)
			held := db.Hold(nil)
			b.ResetTimer()
			for r := range rounds {
				if err := held.Update(ctx, func(tx *store.Tx) error { return round(tx, r) }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(rounds*batch), "µs/job")
		})
	}
}

var benchAgent = kiln.AgentLabels{Labels: kiln.NewLabels("linux")}

// BenchmarkClaimFor times the committer's complete-and-claim claims: 16
// agents accepting the same work each take one job in one transaction —
// every other round 15, as batches differ in size (a statement whose
// bound values steer its plan is compiled again when they change).
func BenchmarkClaimFor(b *testing.B) {
	as := make([]store.ClaimAsk, 16)
	for i := range as {
		as[i] = store.ClaimAsk{AgentID: fmt.Sprintf("agent-%d", i), Labels: benchAgent, Slots: 1}
	}
	benchCommitted(b, len(as), func(*store.DB, int) {}, func(tx *store.Tx, r int) error {
		got, err := tx.Queue().ClaimFor(ctx, as[:len(as)-r%2])
		for i := range got {
			if err == nil && len(got[i]) != 1 {
				err = fmt.Errorf("ask %d got %d jobs", i, len(got[i]))
			}
		}
		return err
	})
}

// BenchmarkStartBatch times the committer's starts: 16 agents' starts in
// one transaction.
func BenchmarkStartBatch(b *testing.B) {
	const batch = 16
	var leases []store.Lease
	benchCommitted(b, batch, func(db *store.DB, rounds int) {
		leases = leases[:0]
		for len(leases) < rounds*batch {
			cs, err := db.Queue().Claim(ctx, "agent", benchAgent, 256)
			if err != nil || len(cs) == 0 {
				b.Fatalf("claim: %d jobs, %v", len(cs), err)
			}
			for _, c := range cs {
				leases = append(leases, store.Lease{JobID: c.JobID, Epoch: c.Epoch})
			}
		}
	}, func(tx *store.Tx, r int) error {
		errs, err := tx.Jobs().StartBatch(ctx, leases[r*batch:(r+1)*batch])
		for _, e := range errs {
			if err == nil {
				err = e
			}
		}
		return err
	})
}
