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
	// nextRunNumber is the SQL expression of the next run number.
	nextRunNumber() string
}
