package store

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
)

// TestCombinedOperationsFailAlone: in a combined SQLite transaction an
// operation that fails leaves no trace and takes nothing else with it,
// whether it ran first (bare, without a savepoint) or later (under one),
// and the operations after a failed first one still commit.
func TestCombinedOperationsFailAlone(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, Config{URL: filepath.Join(t.TempDir(), "kiln.db"), Releaser: func(ReadyJob) Release { return Release{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.write.ExecContext(ctx, "CREATE TABLE combined (n INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	errBoom := errors.New("boom")
	failing := map[*writeReq]bool{}
	op := func(n int64, fail bool) *writeReq {
		r := &writeReq{ctx: ctx, db: db, done: make(chan struct{}), fn: func(t *txn) error {
			if _, err := t.exec(ctx, "INSERT INTO combined (n) VALUES (?)", n); err != nil {
				return err
			}
			if fail {
				return errBoom
			}
			return nil
		}}
		failing[r] = fail
		return r
	}
	for _, c := range []struct {
		name string
		ops  []*writeReq
		want []int64 // every row after the batch
	}{
		{"a failing first operation", []*writeReq{op(1, true), op(2, false), op(3, true), op(4, false)}, []int64{2, 4}},
		{"a failing operation after a good first one", []*writeReq{op(5, false), op(6, true), op(7, false)}, []int64{2, 4, 5, 7}},
		{"only failures", []*writeReq{op(8, true), op(9, true)}, []int64{2, 4, 5, 7}},
	} {
		// A transaction past combineBudget leaves the rest to the next
		// one (a slow machine under -race), as the combiner would.
		for ops := c.ops; len(ops) > 0; {
			n := db.runBatch(ops)
			if n == 0 {
				t.Fatalf("%s: a batch ran none of %d operations", c.name, len(ops))
			}
			ops = ops[n:]
		}
		for _, r := range c.ops {
			<-r.done
		}
		var got []int64
		rows, err := db.write.QueryContext(ctx, "SELECT n FROM combined ORDER BY n")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n int64
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: rows %v, want %v", c.name, got, c.want)
		}
		for i, r := range c.ops {
			if failing[r] != errors.Is(r.err, errBoom) || (!failing[r] && r.err != nil) {
				t.Errorf("%s: operation %d: %v", c.name, i, r.err)
			}
		}
	}
}
