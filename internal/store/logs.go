package store

import (
	"context"
	"fmt"
)

// Logs indexes step logs. The bytes live in files (logstore); a chunk row
// says which byte range of the job's log holds which sequence numbers of a
// step, and a per-(job, step) mark holds the highest sequence number
// acknowledged, so a line an agent replays after a reconnect is recognised
// as a duplicate.
type Logs struct{ h handle }

// Chunk is one indexed range of a step's log.
type Chunk struct {
	JobID    string
	Step     int
	FirstSeq int64 // sequence numbers start at 1
	LastSeq  int64
	Offset   int64 // byte offset in the job's log file
	Length   int64
}

// Append indexes chunks in one transaction and raises each (job, step)'s
// high-water mark to the largest LastSeq seen. Re-appending a chunk with the
// same (job, step, first seq) changes nothing.
func (l Logs) Append(ctx context.Context, chunks ...Chunk) error {
	for _, c := range chunks {
		if c.FirstSeq <= 0 || c.LastSeq < c.FirstSeq || c.Offset < 0 || c.Length < 0 || c.Step < 0 {
			return invalid("log chunk %s/%d [%d, %d] at %d+%d is malformed", c.JobID, c.Step, c.FirstSeq, c.LastSeq, c.Offset, c.Length)
		}
	}
	if len(chunks) == 0 {
		return nil
	}
	return l.h.write(ctx, func(t *txn) error {
		rows := make([][]any, len(chunks))
		marks := map[[2]any]int64{}
		for i, c := range chunks {
			rows[i] = []any{c.JobID, c.Step, c.FirstSeq, c.LastSeq, c.Offset, c.Length}
			k := [2]any{c.JobID, c.Step}
			marks[k] = max(marks[k], c.LastSeq)
		}
		for start := 0; start < len(rows); start += 1000 {
			chunk := rows[start:min(start+1000, len(rows))]
			q := "INSERT INTO log_chunks (job_id, step_idx, first_seq, last_seq, byte_offset, byte_length) VALUES "
			args := make([]any, 0, len(chunk)*6)
			for i, r := range chunk {
				if i > 0 {
					q += ", "
				}
				q += "(?, ?, ?, ?, ?, ?)"
				args = append(args, r...)
			}
			if _, err := t.exec(ctx, q+" ON CONFLICT (job_id, step_idx, first_seq) DO NOTHING", args...); err != nil {
				return fmt.Errorf("index log chunks: %w", err)
			}
		}
		for k, seq := range marks {
			if _, err := t.exec(ctx, `INSERT INTO log_marks (job_id, step_idx, acked_seq) VALUES (?, ?, ?)
				ON CONFLICT (job_id, step_idx) DO UPDATE SET acked_seq = CASE
					WHEN excluded.acked_seq > log_marks.acked_seq THEN excluded.acked_seq ELSE log_marks.acked_seq END`,
				k[0], k[1], seq); err != nil {
				return fmt.Errorf("log high-water mark: %w", err)
			}
		}
		return nil
	})
}

// HighWater returns the highest acknowledged sequence number of a step's log
// (0 when none).
func (l Logs) HighWater(ctx context.Context, jobID string, step int) (int64, error) {
	var seq int64
	err := l.h.reader().queryRow(ctx, "SELECT acked_seq FROM log_marks WHERE job_id = ? AND step_idx = ?", jobID, step).Scan(&seq)
	if isNoRows(err) {
		return 0, nil
	}
	return seq, err
}

// Chunks lists a step's chunks holding sequence numbers after afterSeq, in
// order.
func (l Logs) Chunks(ctx context.Context, jobID string, step int, afterSeq int64) ([]Chunk, error) {
	rows, err := l.h.reader().query(ctx, `SELECT job_id, step_idx, first_seq, last_seq, byte_offset, byte_length FROM log_chunks
		WHERE job_id = ? AND step_idx = ? AND last_seq > ? ORDER BY first_seq`, jobID, step, afterSeq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Chunk
	for rows.Next() {
		var c Chunk
		if err := rows.Scan(&c.JobID, &c.Step, &c.FirstSeq, &c.LastSeq, &c.Offset, &c.Length); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
