package store_test

import (
	"fmt"
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
		for r := 0; r < 10; r++ {
			var jobs []store.NewJob
			for i := 0; i < 200; i++ {
				jobs = append(jobs, job(fmt.Sprintf("j%d", i)))
			}
			mustCreate(t, db, newRun(jobs...))
		}
		if _, err := db.SQL().ExecContext(ctx, "ANALYZE jobs"); err != nil {
			t.Fatal(err)
		}
		var key string
		if err := db.SQL().QueryRowContext(ctx, "SELECT queue_key FROM jobs WHERE status = 'queued' LIMIT 1").Scan(&key); err != nil {
			t.Fatal(err)
		}
		q := store.ClaimBranchPostgres
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
		// pgx prepares the statement once per connection, and PostgreSQL
		// may then plan it once for any parameters (a generic plan): both
		// plans must be the ordered scan.
		conn, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "PREPARE claim_branch AS "+q+" FOR UPDATE SKIP LOCKED"); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			rows, err := conn.QueryContext(ctx, "EXPLAIN EXECUTE claim_branch ('"+strings.ReplaceAll(key, "'", "''")+"', 0, 32)")
			if err != nil {
				t.Fatal(err)
			}
			var plan strings.Builder
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan.WriteString(line + "\n")
			}
			rows.Close()
			if p := plan.String(); !strings.Contains(p, "Index Scan using jobs_queued") || strings.Contains(p, "Sort") || strings.Contains(p, "jobs_pkey") {
				t.Fatalf("%s: the claim is not an ordered scan of jobs_queued:\n%s", mode, p)
			}
		}
		if _, err := conn.ExecContext(ctx, "DEALLOCATE claim_branch; RESET plan_cache_mode"); err != nil {
			t.Fatal(err)
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
		q, explain := store.AgentHoldsSQL(), "EXPLAIN QUERY PLAN "
		if db.Dialect() == "postgres" {
			q, explain = strings.Replace(q, "?", "$1", 1), "EXPLAIN "
			if _, err := db.SQL().ExecContext(ctx, "ANALYZE jobs"); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := db.SQL().QueryContext(ctx, explain+q, "agent-1")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
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
		if !strings.Contains(plan.String(), "jobs_agent") {
			t.Fatalf("the agent's sweep does not read jobs_agent:\n%s", plan.String())
		}
	})
}
