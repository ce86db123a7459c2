package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
)

// insertTable is a table as insertRows writes it: its columns, each with
// the PostgreSQL type of its array (text or bigint).
type insertTable struct {
	name  string
	cols  []string
	types []string
}

// newInsertTable takes "col type, col type, …".
func newInsertTable(name, spec string) insertTable {
	t := insertTable{name: name}
	for _, c := range strings.Split(spec, ", ") {
		col, typ, _ := strings.Cut(c, " ")
		t.cols, t.types = append(t.cols, col), append(t.types, typ)
	}
	return t
}

var (
	jobsTable = newInsertTable("jobs", "id text, run_id text, idx bigint, name text, base text, matrix text, status text, "+
		"ready bigint, has_dependents bigint, max_parallel bigint, fail_fast bigint, on_agent_lost text, "+
		"queue_key text, pending_reason text, pending_since bigint, queued_at bigint, expires_at bigint, result text, "+
		"outputs text, error text, finished_at bigint, created_at bigint, updated_at bigint")
	jobSpecsTable  = newInsertTable("job_specs", "job_id text, spec text")
	needsTable     = newInsertTable("needs", "job_id text, run_id text, upstream text, accept text")
	stepsTable     = newInsertTable("steps", "job_id text, idx bigint, name text, status text")
	runEventsTable = newInsertTable("run_events", "run_id text, job_id text, at bigint, type text, detail text")
)

// tableRows are rows to insert into tbl, values in its column order.
type tableRows struct {
	tbl  insertTable
	rows [][]any
}

// insertRows inserts rows into tables, in order. On PostgreSQL each
// table's rows go as one array per column, unnested — one statement text
// for any number of rows (see oneOf), one parameter per column where a
// multi-row VALUES list had one per value: encoding thousands of
// parameters was most of the server's CPU in creating a large run — and
// all the tables in one statement, each but the last in a WITH clause: a
// run's jobs, needs and steps cost one round trip. (Their foreign keys are
// checked when the statement ends, when every row is in.) On SQLite,
// multi-row INSERTs of a few fixed sizes (insertValues).
func (t *txn) insertRows(ctx context.Context, sets ...tableRows) error {
	if t.db.dialect.writesInWith() {
		return t.insertUnnest(ctx, sets)
	}
	for _, set := range sets {
		if err := t.insertValues(ctx, set.tbl, set.rows); err != nil {
			return fmt.Errorf("insert into %s: %w", set.tbl.name, err)
		}
	}
	return nil
}

// insertValues is SQLite's insert: multi-row INSERTs of a few fixed sizes
// (insertChunk), each a statement prepared once. A statement sized to the
// whole run was parsed afresh every time — about 16 µs of the server's CPU
// per job created, as much as running it.
func (t *txn) insertValues(ctx context.Context, tbl insertTable, rows [][]any) error {
	for len(rows) > 0 {
		n := insertChunk(len(rows))
		args := make([]any, 0, n*len(tbl.cols))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		if _, err := t.execFixed(ctx, valuesInsert(tbl, n), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// insertChunk is how many of n rows the next INSERT takes: the largest
// power of two up to 32 (a 24-column row then has 768 parameters, well
// inside SQLite's limit) not above n, so a table has six statement texts
// and a remainder takes at most five statements.
func insertChunk(n int) int {
	c := 32
	for c > n {
		c /= 2
	}
	return c
}

// valuesInsert is the INSERT of n rows into tbl.
func valuesInsert(tbl insertTable, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "INSERT INTO %s (%s) VALUES ", tbl.name, strings.Join(tbl.cols, ", "))
	row := "(" + marks(len(tbl.cols)) + ")"
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

func (t *txn) insertUnnest(ctx context.Context, sets []tableRows) error {
	var inserts []string
	var args []any
	for _, set := range sets {
		if len(set.rows) == 0 {
			continue
		}
		ins, insArgs, err := unnestInsert(set)
		if err != nil {
			return err
		}
		inserts, args = append(inserts, ins), append(args, insArgs...)
	}
	if len(inserts) == 0 {
		return nil
	}
	var b strings.Builder
	for i, ins := range inserts[:len(inserts)-1] {
		if i == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "i%d AS (%s) ", i, ins)
	}
	b.WriteString(inserts[len(inserts)-1])
	_, err := t.exec(ctx, b.String(), args...)
	return err
}

// unnestInsert is PostgreSQL's INSERT of set's rows, one array per column.
func unnestInsert(set tableRows) (string, []any, error) {
	tbl := set.tbl
	arrays := make([]string, len(tbl.cols))
	args := make([]any, len(tbl.cols))
	for c, typ := range tbl.types {
		arrays[c] = "?::" + typ + "[]"
		var err error
		if typ == "bigint" {
			args[c], err = column(set.rows, c, asInt64)
		} else {
			args[c], err = column(set.rows, c, asString)
		}
		if err != nil {
			return "", nil, fmt.Errorf("insert into %s: column %s: %w", tbl.name, tbl.cols[c], err)
		}
	}
	return "INSERT INTO " + tbl.name + " (" + strings.Join(tbl.cols, ", ") + ") SELECT * FROM unnest(" + strings.Join(arrays, ", ") + ")", args, nil
}

// column gathers column c of rows, NULL as nil.
func column[T any](rows [][]any, c int, conv func(any) (T, bool)) ([]*T, error) {
	out := make([]*T, len(rows))
	vals := make([]T, len(rows))
	for i, r := range rows {
		if r[c] == nil {
			continue
		}
		v, ok := conv(r[c])
		if !ok {
			return nil, fmt.Errorf("a %T is not of the column's type", r[c])
		}
		vals[i] = v
		out[i] = &vals[i]
	}
	return out, nil
}

// asString and asInt64 take a value as database/sql would (a named
// string or integer type too).
func asString(v any) (string, bool) {
	if s, ok := v.(string); ok {
		return s, true
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return rv.String(), true
	}
	return "", false
}

func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Bool:
		if rv.Bool() {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}
