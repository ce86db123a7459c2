package store

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// TestInsertColumnsAreTypedArrays: insertRows' PostgreSQL arrays keep
// NULLs as NULLs, take named string and integer types as database/sql
// would, and refuse a value of another type with the column's name
// instead of sending it.
func TestInsertColumnsAreTypedArrays(t *testing.T) {
	rows := [][]any{{"a", int64(1)}, {nil, nil}, {kiln.JobQueued, 7}, {"d", true}}
	texts, err := column(rows, 0, asString)
	if err != nil {
		t.Fatal(err)
	}
	if *texts[0] != "a" || texts[1] != nil || *texts[2] != "queued" || *texts[3] != "d" {
		t.Fatalf("text column: %v", texts)
	}
	ints, err := column(rows, 1, asInt64)
	if err != nil {
		t.Fatal(err)
	}
	if *ints[0] != 1 || ints[1] != nil || *ints[2] != 7 || *ints[3] != 1 {
		t.Fatalf("bigint column: %v", ints)
	}
	if _, err := column([][]any{{1.5}}, 0, asInt64); err == nil || !strings.Contains(err.Error(), "float64") {
		t.Fatalf("a float in a bigint column: %v", err)
	}
	tbl := newInsertTable("steps", "job_id text, idx bigint")
	if strings.Join(tbl.cols, ",") != "job_id,idx" || strings.Join(tbl.types, ",") != "text,bigint" {
		t.Fatalf("table: %+v", tbl)
	}
}
