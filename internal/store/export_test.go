package store

// ClaimBranchPostgres is the claim's per-key query on PostgreSQL, for the
// plan test in package store_test.
const ClaimBranchPostgres = claimBranchPostgres
