package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/kilnci/kiln/internal/proto"
)

// A gap is what the outbox dropped from one step's log before a frame's
// lines: runs of lines, each of which becomes one system "marker" line in
// the log. A marker takes the seq of the first line of its run, so the log
// keeps one line per seq (the orchestrator stores a seq once and drops any
// later line with the same seq), and its text says how many lines it stands
// for. Renumbering the lines after a gap instead would collide with seqs the
// orchestrator may already hold.
//
// Whether the orchestrator already holds a run's first seq depends on
// whether the run was ever written:
//   - A run of lines never written was certainly lost. Its seqs are free, so
//     its marker is always stored, and two such runs can merge into one
//     marker (the usual case: one marker per outage).
//   - A run that was written (a frame written but not acknowledged, or a
//     marker already written) may have arrived. Its marker keeps the seq the
//     written frame had, so it is stored only if that frame never arrived,
//     which is exactly when its lines were lost. Such a run never merges
//     with another, or the other's loss could hide behind its seq.
type gap []gapRun

type gapRun struct {
	seq     uint64 // the first line's seq: the marker's seq
	lines   int
	written bool
	lostAt  time.Time // when the connection was lost; zero: dropped while connected
	backAt  time.Time // when it came back
}

// maxRuns bounds the markers before one frame's lines.
const maxRuns = 64

// merge returns the runs of g and o in seq order, never-written neighbours
// joined, and at most limit runs.
func (g gap) merge(o gap, limit int) gap {
	out := append(append(gap(nil), g...), o...)
	slices.SortFunc(out, func(a, b gapRun) int { return cmpSeq(a.seq, b.seq) })
	for i := 0; i+1 < len(out); {
		if !out[i].written && !out[i+1].written {
			out[i] = joinRuns(out[i], out[i+1], false)
			out = slices.Delete(out, i+1, i+2)
			continue
		}
		i++
	}
	for len(out) > max(limit, 1) {
		// Over the limit (a degenerate case: many written frames dropped
		// unacknowledged). Join a pair that includes a never-written run
		// under that run's seq, so its loss still shows.
		i := slices.IndexFunc(out, func(r gapRun) bool { return !r.written })
		switch {
		case i < 0:
			out[0] = joinRuns(out[0], out[1], true)
			out = slices.Delete(out, 1, 2)
		case i+1 < len(out):
			out[i] = joinRuns(out[i], out[i+1], false)
			out = slices.Delete(out, i+1, i+2)
		default:
			r := joinRuns(out[i-1], out[i], false)
			r.seq = out[i].seq
			out[i-1] = r
			out = out[:i]
		}
	}
	return out
}

func joinRuns(a, b gapRun, written bool) gapRun {
	r := gapRun{seq: a.seq, lines: a.lines + b.lines, written: written, lostAt: a.lostAt, backAt: later(a.backAt, b.backAt)}
	if r.lostAt.IsZero() || (!b.lostAt.IsZero() && b.lostAt.Before(r.lostAt)) {
		r.lostAt = b.lostAt
	}
	return r
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// markers renders the gap's marker lines.
func (g gap) markers(now time.Time) []proto.LogLine {
	out := make([]proto.LogLine, len(g))
	for i, r := range g {
		out[i] = proto.LogLine{Seq: r.seq, Stream: proto.StreamSystem, Text: r.text(now), TimeMS: now.UnixMilli()}
	}
	return out
}

func (r gapRun) text(now time.Time) string {
	what := fmt.Sprintf("%d log lines were dropped", r.lines)
	if r.lines == 1 {
		what = "1 log line was dropped"
	}
	if r.lostAt.IsZero() {
		return fmt.Sprintf("--- kiln agent: the orchestrator fell behind; %s ---", what)
	}
	back := r.backAt
	if back.IsZero() {
		back = now
	}
	return fmt.Sprintf("--- kiln agent: the connection to the orchestrator was lost for %s; %s ---", back.Sub(r.lostAt).Round(time.Second), what)
}
