package store

// ClaimBranchPostgres is the claim's per-key query on PostgreSQL, for the
// plan test in package store_test.
const ClaimBranchPostgres = claimBranchPostgres

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
