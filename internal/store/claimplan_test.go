package store_test

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// TestClaimPlanUsesTheQueueIndex: with statistics taken while every job was
// queued (the moment after a burst), PostgreSQL still claims through the
// queue index. Ordered by plain id it walked the primary key instead, through
// every finished job, on each claim.
func TestClaimPlanUsesTheQueueIndex(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("SQLite plans by its indexes; the statistics trap is PostgreSQL's")
		}
		queueRuns(t, db, 10, 200)
		if _, err := db.SQL().ExecContext(ctx, "ANALYZE jobs"); err != nil {
			t.Fatal(err)
		}
		var key string
		if err := db.SQL().QueryRowContext(ctx, "SELECT queue_key FROM jobs WHERE status = 'queued' LIMIT 1").Scan(&key); err != nil {
			t.Fatal(err)
		}
		plans(t, db, "claim_branch", store.ClaimBranchPostgres+" FOR UPDATE SKIP LOCKED",
			"('"+strings.ReplaceAll(key, "'", "''")+"', 0, 32)", func(mode, p string) {
				if !strings.Contains(p, "Index Scan using jobs_queued") || strings.Contains(p, "Sort") || strings.Contains(p, "jobs_pkey") {
					t.Fatalf("%s: the claim is not an ordered scan of jobs_queued:\n%s", mode, p)
				}
			})
	})
}

// TestClaimPlanHoldsWithoutStatistics: a database that was never analyzed
// (a new install's first burst: autovacuum analyzes a table a minute after
// it changed, at best) estimates one row for every filtered scan of jobs.
// The whole claim must still read its key's queue in order through
// jobs_queued and update the rows it picked by primary key; and so after an
// ANALYZE taken while every job was queued. Planned with the update's guard
// on an indexed status, the update read every queued job once per claimed
// one: 87 ms for a 40-job claim with 10,000 jobs queued. The runs the claim
// starts are found the same way, by primary key from the claimed jobs' runs:
// through runs_status, every pending run was read and compared with every
// claimed job. Proves B159 (docs/behaviours.md).
func TestClaimPlanHoldsWithoutStatistics(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("SQLite plans without statistics by its own rules")
		}
		queueRuns(t, db, 40, 256)
		var key string
		if err := db.SQL().QueryRowContext(ctx, "SELECT queue_key FROM jobs WHERE status = 'queued' LIMIT 1").Scan(&key); err != nil {
			t.Fatal(err)
		}
		slots := 32
		asks := strings.TrimSuffix(strings.Repeat("0,", slots), ",")
		agents := strings.TrimSuffix(strings.Repeat("'agent-1',", slots), ",")
		args := fmt.Sprintf("('%s', 0, %d, %d, ARRAY[%s], ARRAY[%s], 0, 0, 0, 0, 0, 0, 0)",
			strings.ReplaceAll(key, "'", "''"), slots, slots, asks, agents)
		check := func(mode, p string) {
			t.Helper()
			section := ""
			for _, line := range strings.Split(p, "\n") {
				if c := strings.TrimSpace(line); strings.HasPrefix(c, "CTE ") {
					section = strings.TrimPrefix(c, "CTE ")
				}
				if strings.Contains(line, "Scan") && strings.Contains(line, " on jobs j ") && !strings.Contains(line, "jobs_pkey") {
					t.Fatalf("%s: the claim's update does not find its rows by primary key:\n%s", mode, p)
				}
				if section == "c0" && (strings.Contains(line, "Sort") || strings.Contains(line, "jobs_queue_expiry")) {
					t.Fatalf("%s: the claim does not read its key's queue in order through jobs_queued:\n%s", mode, p)
				}
				if section == "started" && (strings.Contains(line, "Seq Scan on runs") || readsRunsIndex(line)) {
					t.Fatalf("%s: the runs the claim starts are not found by primary key from the claimed jobs:\n%s", mode, p)
				}
			}
			if !strings.Contains(p, "jobs_queued") {
				t.Fatalf("%s: the claim does not read jobs_queued:\n%s", mode, p)
			}
		}
		// The test's table is small enough to read whole; a fleet's is
		// not. Among the index paths, the plan must take the right ones.
		plans(t, db, "claim_cold", store.ClaimSQLPostgres(1), args, check, "SET enable_seqscan = off")
		if _, err := db.SQL().ExecContext(ctx, "ANALYZE jobs"); err != nil {
			t.Fatal(err)
		}
		plans(t, db, "claim_analyzed", store.ClaimSQLPostgres(1), args, check, "SET enable_seqscan = off")
		// A burst after the statistics were taken with no job queued
		// (yesterday's jobs all done): status = 'queued' looks rare.
		if _, err := db.SQL().ExecContext(ctx, "UPDATE jobs SET status = 'succeeded'"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SQL().ExecContext(ctx, "ANALYZE jobs"); err != nil {
			t.Fatal(err)
		}
		queueRuns(t, db, 40, 256)
		plans(t, db, "claim_burst", store.ClaimSQLPostgres(1), args, check, "SET enable_seqscan = off")
	})
}

// TestStartingRunsReadsOnlyThoseRuns: a batch of job starts stored with
// their ends moves the runs still pending to running by primary key,
// without statistics too; it read every pending run through runs_status to
// intersect them with its own. Proves B159 (docs/behaviours.md).
func TestStartingRunsReadsOnlyThoseRuns(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("SQLite reads a row by its key")
		}
		queueRuns(t, db, 40, 16)
		plans(t, db, "start_runs", store.StartRunsSQLPostgres(), "(0, 0, ARRAY['run-a', 'run-b'])", func(mode, p string) {
			if strings.Contains(p, "Seq Scan on runs") || readsRunsIndex(p) {
				t.Fatalf("%s: the runs to start are not read by primary key alone:\n%s", mode, p)
			}
		}, "SET enable_seqscan = off")
	})
}

// readsRunsIndex reports whether a plan line reads an index of runs other
// than its primary key.
func readsRunsIndex(line string) bool {
	for _, name := range runsIndexName.FindAllString(line, -1) {
		if name != "runs_pkey" {
			return true
		}
	}
	return false
}

var runsIndexName = regexp.MustCompile(`\bruns_\w+`)

// TestQueueStatementsArePlannedForTheTablesSize: pgx prepares a statement
// once per connection and PostgreSQL may then keep one plan for it, made
// with the tables as they were; agents claim as they connect, on an empty
// queue, so that plan read the whole table once it filled (460 ms a claim
// with 10,000 queued, until autovacuum's ANALYZE). The claim and its read
// of the queued keys carry the jobs table's size class in their text, so
// the plans a connection holds for them were made on a table of about the
// size they run on: none made on the small table is used once it is large.
func TestQueueStatementsArePlannedForTheTablesSize(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("PostgreSQL's plan cache")
		}
		db.SQL().SetMaxOpenConns(1) // every statement on the one connection the test then reads
		prepared := func() (small, large int) {
			t.Helper()
			for range 7 {
				store.ExpireKeys(db)
				if _, err := db.Queue().Claim(ctx, "agent-1", linux, 2); err != nil {
					t.Fatal(err)
				}
			}
			err := db.SQL().QueryRowContext(ctx, `SELECT
				count(*) FILTER (WHERE statement NOT LIKE '%class 8 */'),
				count(*) FILTER (WHERE statement LIKE '%class 8 */')
				FROM pg_prepared_statements WHERE (statement LIKE '%pick AS%' OR statement LIKE '%RECURSIVE k(key)%')
				AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&small, &large)
			if err != nil {
				t.Fatal(err)
			}
			return small, large
		}
		queueRuns(t, db, 2, 10)
		if small, large := prepared(); small != 2 || large != 0 {
			t.Fatalf("small table: prepared %d claims and key reads of a small class (want both), %d of the large one (want none)", small, large)
		}
		queueRuns(t, db, 20, 256)
		if _, large := prepared(); large != 2 {
			t.Fatalf("large table: prepared %d claims and key reads of the large class, want both", large)
		}
	})
}

// TestExpirySweepUsesTheExpiryIndex: jobs_queue_expiry holds only the
// queued jobs that can expire (so that it cannot serve the claim), and the
// expiry sweep still reads it on both databases.
func TestExpirySweepUsesTheExpiryIndex(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		queueRuns(t, db, 4, 100)
		if db.Dialect() == "postgres" {
			plans(t, db, "expiry_sweep", store.ExpirySweep, "(0, 64)", func(mode, p string) {
				if !strings.Contains(p, "jobs_queue_expiry") {
					t.Fatalf("%s: the expiry sweep does not read jobs_queue_expiry:\n%s", mode, p)
				}
			}, "SET enable_seqscan = off")
			return
		}
		if p := planOf(t, db, store.ExpirySweep, 0, 64); !strings.Contains(p, "jobs_queue_expiry") {
			t.Fatalf("the expiry sweep does not read jobs_queue_expiry:\n%s", p)
		}
	})
}

// TestAgentSweepUsesTheAgentIndex: an agent's registration reads the jobs
// it held through jobs_agent, not by walking every job of the active runs
// (a reconnect storm pays this read once per agent, in the committer).
func TestAgentSweepUsesTheAgentIndex(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		for r := 0; r < 5; r++ {
			var jobs []store.NewJob
			for i := 0; i < 200; i++ {
				jobs = append(jobs, job(fmt.Sprintf("j%d", i)))
			}
			mustCreate(t, db, newRun(jobs...))
		}
		if _, err := db.Queue().Claim(ctx, "agent-1", linux, 3); err != nil {
			t.Fatal(err)
		}
		if db.Dialect() == "postgres" {
			if _, err := db.SQL().ExecContext(ctx, "ANALYZE jobs"); err != nil {
				t.Fatal(err)
			}
		}
		if p := planOf(t, db, store.AgentHoldsSQL(), "agent-1"); !strings.Contains(p, "jobs_agent") {
			t.Fatalf("the agent's sweep does not read jobs_agent:\n%s", p)
		}
	})
}

// planOf returns the plan of q (its ? placeholders rebound as $1, $2 … on
// PostgreSQL) with args, one line per step: EXPLAIN QUERY PLAN's details on
// SQLite, EXPLAIN's lines on PostgreSQL.
func planOf(t *testing.T, db *store.DB, q string, args ...any) string {
	t.Helper()
	explain := "EXPLAIN QUERY PLAN "
	if db.Dialect() == "postgres" {
		explain = "EXPLAIN "
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
	}
	rows, err := db.SQL().QueryContext(ctx, explain+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&plan, *(vals[len(vals)-1].(*any)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// TestStartPlanFindsJobsByKey: a batch's start names its jobs, and
// PostgreSQL's generic plan finds them by primary key, not through a
// bitmap of the partial indexes of every dispatched job (jobs_agent,
// jobs_ack: thousands of entries at 100 agents, most of the start's time
// before the rows are read).
func TestStartPlanFindsJobsByKey(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("PostgreSQL's generic plan")
		}
		queueRuns(t, db, 10, 200)
		var ids []string
		for a := 0; a < 40; a++ {
			cs, err := db.Queue().Claim(ctx, fmt.Sprintf("agent-%d", a), linux, 25)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				ids = append(ids, "'"+c.JobID+"'")
			}
		}
		if _, err := db.SQL().ExecContext(ctx, "ANALYZE jobs"); err != nil {
			t.Fatal(err)
		}
		// The test's table is small enough to read whole; a fleet's is
		// not. Among the index paths, the plan must take the key.
		list := "ARRAY[" + strings.Join(ids[:32], ",") + "]"
		epochs := strings.TrimSuffix(strings.Repeat("1,", 32), ",")
		plans(t, db, "start_batch", store.StartSQLPostgres(), "(0, 0, 0, "+list+", "+list+", ARRAY["+epochs+"])",
			func(mode, p string) {
				if !strings.Contains(p, "jobs_pkey") || strings.Contains(p, "jobs_agent") || strings.Contains(p, "jobs_ack") {
					t.Fatalf("%s: the start does not find its jobs by primary key:\n%s", mode, p)
				}
			}, "SET enable_seqscan = off")
	})
}

// plans prepares q (its ? placeholders rebound as $1, $2 …) as name on a
// connection of its own, after the setup statements, and hands check the
// plan of its execution with args under a custom plan and under a generic
// one: pgx prepares a statement once per connection, and PostgreSQL may
// then plan it once for any parameters, so both must be right. The
// connection's session is reset before it goes back to the pool.
func plans(t *testing.T, db *store.DB, name, q, args string, check func(mode, plan string), setup ...string) {
	t.Helper()
	for i := 1; strings.Contains(q, "?"); i++ {
		q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
	}
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, stmt := range append(setup, "PREPARE "+name+" AS "+q) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if _, err := conn.ExecContext(ctx, "DEALLOCATE "+name+"; RESET ALL"); err != nil {
			t.Error(err)
		}
	}()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		check(mode, explain(t, conn, "EXECUTE "+name+" "+args))
	}
}

// explain returns PostgreSQL's plan for stmt on conn, one line per row.
func explain(t *testing.T, conn *sql.Conn, stmt string) string {
	t.Helper()
	rows, err := conn.QueryContext(ctx, "EXPLAIN "+stmt)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// queueRuns creates runs of jobs root jobs each, every one queued.
func queueRuns(t *testing.T, db *store.DB, runs, jobs int) {
	t.Helper()
	for r := 0; r < runs; r++ {
		var js []store.NewJob
		for i := 0; i < jobs; i++ {
			js = append(js, job(fmt.Sprintf("j%d", i)))
		}
		mustCreate(t, db, newRun(js...))
	}
}
