package store

import (
	"database/sql"
	"time"
)

// Times are stored as unix milliseconds (BIGINT) in both databases: portable,
// indexable, and exact under a fake clock. The zero time is NULL.

func ms(t time.Time) int64 { return t.UnixMilli() }

// nullMS is ms for a column that may be NULL.
func nullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// nullString is s for a column that may be NULL ("" is NULL).
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
