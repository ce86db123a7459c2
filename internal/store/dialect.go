package store

import "context"

// dialect is what differs between SQLite and PostgreSQL beyond DDL. Most SQL
// is written once with ? placeholders and rebound; the claim statement is
// written per dialect in claim_sqlite.go and claim_postgres.go.
type dialect interface {
	name() string
	// dollarParams: placeholders are $1, $2 … rather than ?.
	dollarParams() bool
	// retryable reports an error after which the whole transaction may be
	// rerun (a deadlock victim, a serialization failure).
	retryable(err error) bool
	wrap(err error) error
	// lockRuns and lockRunsOfJobs serialize job changes per run.
	lockRuns(ctx context.Context, t *txn, runIDs []string) error
	lockRunsOfJobs(ctx context.Context, t *txn, jobIDs []string) error
	// runsLockedFirst is lockRunsOfJobs as a condition of the statement
	// that changes the jobs, taken before it reads a row (one round trip
	// for both); "" where lockRunsOfJobs has nothing to do.
	runsLockedFirst(jobIDs []string) (string, []any)
	// nextRunNumber is the SQL expression of the next run number.
	nextRunNumber() string
	// oneOf is the condition "col is one of vals" and its arguments;
	// pairOf is "(a, b) is one of the pairs (as[i], bs[i])".
	oneOf(col string, vals []string) (string, []any)
	pairOf(a, b string, as []string, bs []int64) (string, []any)
	// writesInWith: INSERT, UPDATE and DELETE may stand in a WITH clause.
	writesInWith() bool
	// lateral: a subquery in FROM may read the columns of the tables
	// before it (LATERAL).
	lateral() bool
}

// A batch's statements name its jobs, and their number changes from one
// batch to the next. Written as IN lists of placeholders, every size is
// another statement text: on PostgreSQL another statement to parse, to
// prepare on the connection and to plan afresh on every execution (a
// custom plan, as the text is seldom run five times) — about a third of
// the database's time in the fleet's committer, measured with
// pg_stat_statements in kiln bench. There the values travel as arrays, one
// parameter each, and the text is the same for any batch. On SQLite they
// travel as one JSON array read by json_each, for the same reason: a
// statement compiled on every call cost more than running it (the starts,
// one statement per job to stay cached, 62-73 -> 36-48 µs a job batched).
