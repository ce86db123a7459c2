package web

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/jsonwire"
)

// logFollow streams a running job's new log lines as server-sent events
// (B308). The position — the last seq the page holds of each step — comes
// in ?from= and, after a reconnect, in Last-Event-ID (every event's id is
// the position after it), so a page that lost its connection resumes
// where it was: no line twice, none lost. A line of a newer attempt sends
// "attempt" (the page reloads); the job's end sends "end". At most
// ViewersPerJob follow one job on this server.
func (s *site) logFollow(w http.ResponseWriter, r *http.Request) error {
	tk := sessionOf(r).Token
	run, job, err := s.findJob(r.Context(), tk, r.PathValue("run"), r.PathValue("job"))
	if err != nil {
		return err
	}
	pos := r.URL.Query().Get("from")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		pos = id
	}
	attempt, from, err := parsePosition(pos)
	if err != nil {
		return err
	}
	if attempt == 0 {
		attempt = job.Attempt
	}
	if !s.addViewer(job.ID) {
		w.Header().Set("Retry-After", "30")
		return kiln.Errorf(kiln.CodeUnavailable, "too many people follow this job's log on this server; reload later")
	}
	defer s.dropViewer(job.ID)

	// A follow lasts as long as the job: the server's read timeout must not
	// end it (writes take their own deadlines).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A lost connection is retried after a second, from the last event's id.
	_, _ = w.Write([]byte("retry: 1000\n\n"))
	_ = rc.Flush()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	lines := make(chan api.LogLine, 256)
	done := make(chan error, 1)
	go func() {
		done <- s.client(tk).Logs(ctx, run.ID, api.LogQuery{Job: job.ID, Follow: true}, func(l api.LogLine) error {
			select {
			case lines <- l:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		close(lines)
	}()
	ping := time.NewTicker(s.cfg.FollowKeepalive)
	defer ping.Stop()
	ev := newEventBatch(attempt, from)
	flush := func() error {
		if len(ev.buf) == 0 {
			return nil
		}
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err := w.Write(ev.buf)
		ev.buf = ev.buf[:0]
		if err != nil {
			return err
		}
		return rc.Flush()
	}
	for {
		select {
		case <-ping.C:
			if _, err := w.Write([]byte(": keepalive\n\n")); err != nil || rc.Flush() != nil {
				return nil
			}
		case l, ok := <-lines:
			if !ok {
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					s.log.Warn("web: a log follow ended early", "job", job.ID, "err", err)
					return nil // the browser reconnects and resumes
				}
				ev.add("end", "{}")
				_ = flush()
				return nil
			}
			// Every line ready goes out in one write and one flush: a chatty
			// job's lines cost a system call per batch, not per line.
			for n := 0; ; n++ {
				if ev.line(l) { // a newer attempt: the page reloads
					_ = flush()
					return nil
				}
				if n == maxEventBatch || len(lines) == 0 {
					break // a close, once the lines are drained, is the next receive
				}
				l = <-lines
			}
			if err := flush(); err != nil {
				return nil
			}
		}
	}
}

// maxEventBatch bounds the lines of one write of a follow.
const maxEventBatch = 512

// eventBatch builds a follow's server-sent events. Every line's event
// carries the position after it as its id, so a page cut off anywhere in
// a batch resumes exactly after the last line it got.
type eventBatch struct {
	attempt int64
	from    map[int]uint64
	steps   []int // from's keys, sorted
	buf     []byte
}

func newEventBatch(attempt int64, from map[int]uint64) *eventBatch {
	return &eventBatch{attempt: attempt, from: from, steps: slices.Sorted(maps.Keys(from))}
}

// line adds l's event, if the page has not got it yet; true when l is of a
// newer attempt (the event then says so, and the follow ends).
func (e *eventBatch) line(l api.LogLine) (newer bool) {
	if l.Attempt != e.attempt {
		if l.Attempt > e.attempt {
			e.add("attempt", strconv.FormatInt(l.Attempt, 10))
			return true
		}
		return false
	}
	had, seen := e.from[l.Step]
	if l.Seq <= had {
		return false
	}
	if !seen {
		i, _ := slices.BinarySearch(e.steps, l.Step)
		e.steps = slices.Insert(e.steps, i, l.Step)
	}
	e.from[l.Step] = l.Seq
	// id: the position; data: {"s":step,"q":seq,"c":stream,"h":html}.
	b := append(e.buf, "id: "...)
	b = e.appendPosition(b)
	b = append(b, "\ndata: {\"s\":"...)
	b = strconv.AppendInt(b, int64(l.Step), 10)
	b = append(b, `,"q":`...)
	b = strconv.AppendUint(b, l.Seq, 10)
	b = append(b, `,"c":`...)
	b = jsonwire.AppendString(b, l.Stream)
	b = append(b, `,"h":`...)
	b = jsonwire.AppendString(b, ansiHTML(l.Text))
	e.buf = append(b, "}\n\n"...)
	return false
}

// appendPosition appends "attempt|step:seq,step:seq", steps in order.
func (e *eventBatch) appendPosition(b []byte) []byte {
	b = strconv.AppendInt(b, e.attempt, 10)
	b = append(b, '|')
	for i, step := range e.steps {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(step), 10)
		b = append(b, ':')
		b = strconv.AppendUint(b, e.from[step], 10)
	}
	return b
}

// add adds a named event without an id (attempt, end).
func (e *eventBatch) add(event, data string) {
	e.buf = append(e.buf, "event: "+event+"\ndata: "+data+"\n\n"...)
}

// A position is "attempt|step:seq,step:seq": the attempt followed and the
// last seq the page holds of each step.
func parsePosition(p string) (int64, map[int]uint64, error) {
	from := map[int]uint64{}
	if p == "" {
		return 0, from, nil
	}
	bad := kiln.Errorf(kiln.CodeInvalid, "the log position %.80q is not attempt|step:seq,…", p)
	a, rest, ok := strings.Cut(p, "|")
	attempt, err := strconv.ParseInt(a, 10, 64)
	if !ok || err != nil || attempt < 0 || len(p) > 4096 {
		return 0, nil, bad
	}
	if rest == "" {
		return attempt, from, nil
	}
	for _, part := range strings.Split(rest, ",") {
		st, sq, ok := strings.Cut(part, ":")
		step, err1 := strconv.Atoi(st)
		seq, err2 := strconv.ParseUint(sq, 10, 62)
		if !ok || err1 != nil || err2 != nil || step < checkoutStep || step > 100000 {
			return 0, nil, bad
		}
		from[step] = seq
	}
	return attempt, from, nil
}

func (s *site) addViewer(jobID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.viewers[jobID] >= s.cfg.ViewersPerJob {
		return false
	}
	s.viewers[jobID]++
	return true
}

func (s *site) dropViewer(jobID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.viewers[jobID]--; s.viewers[jobID] <= 0 {
		delete(s.viewers, jobID)
	}
}
