package store

import "context"

// ClaimBranchPostgres is the claim's per-key query on PostgreSQL, for the
// plan test in package store_test.
const ClaimBranchPostgres = claimBranchPostgres

// AgentHoldsSQL is the read of the jobs an agent holds (Queue.AgentLost),
// for the plan test in package store_test.
func AgentHoldsSQL() string { return "SELECT " + candidateCols + " FROM jobs WHERE " + agentHolds }

// SetQueryOnly makes SQLite's writer connection refuse writes (PRAGMA
// query_only), as a database on a full or read-only disk does.
func SetQueryOnly(db *DB, on bool) error {
	v := "OFF"
	if on {
		v = "ON"
	}
	_, err := db.write.Exec("PRAGMA query_only = " + v)
	return err
}

// BackendPID is the PostgreSQL connection tx runs on.
func BackendPID(tx *Tx) (int, error) {
	var pid int
	err := tx.t.queryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}
