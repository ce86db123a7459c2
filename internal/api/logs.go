package api

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/store"
)

// Log read limits.
const (
	defaultLogLimit = 10000
	maxLogLimit     = 100000
	// logPage is how many lines are read from a file at once: it bounds a
	// stream's memory (lines are at most 64 KiB), and since each read scans
	// the file from its start, a smaller page costs more on long logs.
	logPage      = 1000
	checkoutStep = -1
)

// logQuery is what GET /runs/{run}/logs asks for.
type logQuery struct {
	job    string // job name, id or matrix base; "" is every job
	step   *int
	after  uint64
	limit  int
	follow bool
}

func parseLogQuery(r *http.Request) (logQuery, error) {
	if err := checkQuery(r, "job", "step", "after", "limit", "follow"); err != nil {
		return logQuery{}, err
	}
	q := logQuery{job: r.URL.Query().Get("job")}
	if r.URL.Query().Has("step") {
		n, err := queryInt(r, "step", 0, checkoutStep, 100000)
		if err != nil {
			return q, err
		}
		step := int(n)
		q.step = &step
	}
	after, err := queryInt(r, "after", 0, 0, 1<<62)
	if err != nil {
		return q, err
	}
	if after > 0 && (q.step == nil || q.job == "") {
		return q, errorf(codeInvalid, "after is a sequence number within one step's log; give job and step with it")
	}
	q.after = uint64(after)
	limit, err := queryInt(r, "limit", defaultLogLimit, 1, maxLogLimit)
	if err != nil {
		return q, err
	}
	q.limit = int(limit)
	q.follow, err = queryBool(r, "follow")
	return q, err
}

func (s *server) runLogs(w http.ResponseWriter, r *http.Request) error {
	q, err := parseLogQuery(r)
	if err != nil {
		return err
	}
	run, err := s.findRun(r.Context(), r.PathValue("run"))
	if err != nil {
		return err
	}
	ls := &logStream{s: s, run: run, q: q, remaining: q.limit, jobs: map[string]*logJob{}}
	for _, j := range run.Jobs {
		// A matrix job's base name ("test") names all of its children.
		if q.job == "" || j.Name == q.job || j.ID == q.job || j.Base == q.job {
			ls.order = append(ls.order, j.ID)
			ls.jobs[j.ID] = newLogJob(j)
		}
	}
	if len(ls.order) == 0 && q.job != "" {
		return errorf(codeNotFound, "run #%d has no job %q", run.Number, q.job)
	}
	ls.out = newLineWriter(w, s.cfg)
	if !q.follow {
		for _, id := range ls.order {
			if err := ls.catchUp(ls.jobs[id]); err != nil {
				return ls.fail(r, err)
			}
		}
		return ls.fail(r, ls.out.flush())
	}
	ls.remaining = -1
	// The server's read timeout would end a follow (net/http cancels the
	// request's context when its background read times out); its writes
	// each take their own deadline instead (B101).
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return ls.fail(r, ls.follow(r.Context()))
}

// logJob is one followed job: its latest row, its subscription, and the
// last seq sent of each step attempt.
type logJob struct {
	job   store.Job
	names map[int]string
	sub   *logstore.Subscription
	seqs  map[logstore.Ref]uint64
	done  bool
	// endedAt is when a follow first saw the job ended (drained).
	endedAt time.Time
}

func newLogJob(j store.Job) *logJob {
	names := map[int]string{checkoutStep: "checkout"}
	for _, st := range j.Steps {
		names[st.Index] = st.Name
	}
	return &logJob{job: j, names: names, seqs: map[logstore.Ref]uint64{}}
}

// logStream answers one log request: the history, then (following) live
// lines until every job in scope finished and its logs were drained.
type logStream struct {
	s         *server
	run       store.Run
	q         logQuery
	order     []string // job ids in run order
	jobs      map[string]*logJob
	out       *lineWriter
	remaining int // lines left to send; -1: no limit
}

// fail ends a stream: before anything was written an error is answered as
// usual; after, it can only be logged (the client sees the stream end).
func (ls *logStream) fail(r *http.Request, err error) error {
	ls.closeSubs()
	if err == nil || !ls.out.started {
		return err
	}
	if r.Context().Err() == nil && !errors.Is(err, errViewerGone) {
		ls.s.log.Warn("api: log stream ended early", "run", ls.run.ID, "err", err)
	}
	return nil
}

func (ls *logStream) closeSubs() {
	for _, j := range ls.jobs {
		if j.sub != nil {
			j.sub.Close()
			j.sub = nil
		}
	}
}

func (ls *logStream) wants(step int) bool { return ls.q.step == nil || *ls.q.step == step }

// catchUp sends, from the files, every line of the job's current attempt
// after the last one sent, step by step.
func (ls *logStream) catchUp(j *logJob) error {
	epoch := j.job.LeaseEpoch
	if epoch < 1 {
		return nil // never dispatched: no logs yet
	}
	steps, err := ls.s.Logs.Steps(ls.run.ID, j.job.ID, epoch)
	if err != nil {
		return err
	}
	for _, step := range steps {
		if !ls.wants(step) {
			continue
		}
		ref := logstore.Ref{RunID: ls.run.ID, JobID: j.job.ID, Epoch: epoch, Step: step}
		// Reading scans a file from its start: skip the ones with nothing new.
		if last, err := ls.s.Logs.Last(ref); err == nil && last <= max(j.seqs[ref], ls.q.after) {
			continue
		}
		if err := ls.catchUpRef(j, ref); err != nil {
			return err
		}
	}
	return nil
}

func (ls *logStream) catchUpRef(j *logJob, ref logstore.Ref) error {
	if _, seen := j.seqs[ref]; !seen && ls.q.after > 0 && ref.Epoch == j.job.LeaseEpoch {
		j.seqs[ref] = ls.q.after
	}
	for ls.remaining != 0 {
		page := logPage
		if ls.remaining > 0 {
			page = min(page, ls.remaining)
		}
		lines, err := ls.s.Logs.ReadJSON(ref, j.seqs[ref], page)
		if err != nil {
			return err
		}
		if err := ls.sendStored(j, ref, lines); err != nil {
			return err
		}
		if len(lines) < page {
			return nil
		}
	}
	return nil
}

// sendStored writes the lines of one step attempt past the last seq sent,
// each as the log store keeps it after the attempt's head
// (appendStoredLogLine): a line is copied, not decoded and encoded again.
func (ls *logStream) sendStored(j *logJob, ref logstore.Ref, lines []logstore.RawLine) error {
	head := appendLogLineHead(nil, &LogLine{Job: j.job.Name, JobID: j.job.ID, Attempt: ref.Epoch, Step: ref.Step,
		StepName: j.names[ref.Step]})
	last := j.seqs[ref]
	n := 0
	for _, l := range lines {
		if l.Seq <= last || ls.remaining == 0 {
			continue
		}
		ls.out.buf = appendStoredLogLine(ls.out.buf, head, l.JSON)
		last = l.Seq
		n++
		if ls.remaining > 0 {
			ls.remaining--
		}
	}
	j.seqs[ref] = last
	if n == 0 {
		return nil
	}
	return ls.out.flush()
}

// follow streams live lines. Every job in scope is subscribed before its
// history is read, so nothing falls between the two; a batch that does not
// follow on from the last line sent (a gap after the subscription lagged or
// before it started) is read from the file instead.
func (ls *logStream) follow(ctx context.Context) error {
	for _, id := range ls.order {
		j := ls.jobs[id]
		if !j.job.Status.Terminal() {
			j.sub = ls.s.Logs.Subscribe(id, ls.s.cfg.LogBuffer)
		}
	}
	for _, id := range ls.order {
		if err := ls.catchUp(ls.jobs[id]); err != nil {
			return err
		}
	}
	if err := ls.out.flush(); err != nil { // the headers: the client knows it is following
		return err
	}
	if err := ls.poll(ctx); err != nil {
		return err
	}
	ticker := time.NewTicker(ls.s.cfg.LogPollInterval)
	defer ticker.Stop()
	for !ls.finished() {
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ticker.C)},
		}
		var subJobs []*logJob
		for _, id := range ls.order {
			if j := ls.jobs[id]; j.sub != nil {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(j.sub.C)})
				subJobs = append(subJobs, j)
			}
		}
		chosen, v, ok := reflect.Select(cases)
		switch chosen {
		case 0:
			return ctx.Err()
		case 1:
			if err := ls.poll(ctx); err != nil {
				return err
			}
			continue
		}
		j := subJobs[chosen-2]
		if !ok {
			if !j.sub.Lagged() {
				return errors.New("the log store closed")
			}
			// The viewer fell behind: resynchronize from the files.
			resyncs.Add(1)
			j.sub = ls.s.Logs.Subscribe(j.job.ID, ls.s.cfg.LogBuffer)
			if err := ls.catchUp(j); err != nil {
				return err
			}
			continue
		}
		if err := ls.live(j, v.Interface().(logstore.Event)); err != nil {
			return err
		}
	}
	return nil
}

// live sends a batch published by the log store.
func (ls *logStream) live(j *logJob, ev logstore.Event) error {
	if len(ev.Lines) == 0 || !ls.wants(ev.Ref.Step) {
		return nil
	}
	if ev.Lines[0].Seq > j.seqs[ev.Ref]+1 {
		return ls.catchUpRef(j, ev.Ref) // a gap: the file has everything
	}
	return ls.sendStored(j, ev.Ref, ev.Lines)
}

// poll rereads the jobs in scope: a new attempt is read from its start; a
// finished job is drained and no longer followed.
func (ls *logStream) poll(ctx context.Context) error {
	var jobs []store.Job
	if len(ls.order) == 1 {
		j, err := ls.s.DB.Jobs().Get(ctx, ls.order[0])
		if err != nil {
			return err
		}
		jobs = []store.Job{j}
	} else {
		run, err := ls.s.DB.Runs().Get(ctx, ls.run.ID)
		if err != nil {
			return err
		}
		jobs = run.Jobs
	}
	for _, fresh := range jobs {
		j := ls.jobs[fresh.ID]
		if j == nil || j.done {
			continue
		}
		newAttempt := fresh.LeaseEpoch != j.job.LeaseEpoch
		j.job = fresh
		// With shared logs the agent may be on another server, whose lines
		// reach this one only through the archive: read it every poll.
		if newAttempt || fresh.Status.Terminal() || ls.s.Logs.Shared() {
			if err := ls.catchUp(j); err != nil {
				return err
			}
		}
		if fresh.Status.Terminal() {
			if ls.s.Logs.Shared() && !ls.drained(ctx, j) {
				continue // the last lines are on their way from the agent's server
			}
			if j.sub != nil {
				j.sub.Close()
				j.sub = nil
			}
			j.done = true
		}
	}
	return nil
}

// shipWait bounds how long a follow waits, after its job ended, for the
// job's last lines to be shipped by the server the agent was connected to.
const shipWait = 10 * time.Second

// drained reports whether every line the database says was stored for an
// ended job's steps has been sent, or the wait for them is over.
func (ls *logStream) drained(ctx context.Context, j *logJob) bool {
	if j.endedAt.IsZero() {
		j.endedAt = time.Now()
	}
	if time.Since(j.endedAt) > shipWait {
		return true
	}
	for _, st := range j.job.Steps {
		if !ls.wants(st.Index) {
			continue
		}
		mark, err := ls.s.DB.Logs().HighWater(ctx, j.job.ID, st.Index)
		ref := logstore.Ref{RunID: ls.run.ID, JobID: j.job.ID, Epoch: j.job.LeaseEpoch, Step: st.Index}
		if err == nil && uint64(mark) > max(j.seqs[ref], ls.q.after) {
			return false
		}
	}
	return true
}

func (ls *logStream) finished() bool {
	for _, j := range ls.jobs {
		if !j.done {
			return false
		}
	}
	return true
}

// resyncs counts lagged subscriptions resynchronized from the files (tests
// read it to prove the path ran).
var resyncs atomic.Int64

// errViewerGone: the client stopped reading for longer than the write
// timeout, or went away.
var errViewerGone = errors.New("the log viewer went away")

// lineWriter writes NDJSON log lines in batches, each with a write deadline
// and a flush, so a slow viewer holds at most one batch of the server's
// memory and a stalled one is dropped.
type lineWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
	started bool
}

func newLineWriter(w http.ResponseWriter, cfg Config) *lineWriter {
	return &lineWriter{w: w, rc: http.NewResponseController(w), timeout: cfg.LogWriteTimeout}
}

func (lw *lineWriter) flush() error {
	if !lw.started {
		lw.started = true
		h := lw.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		lw.w.WriteHeader(http.StatusOK)
	}
	_ = lw.rc.SetWriteDeadline(time.Now().Add(lw.timeout)) // not every writer supports deadlines
	if len(lw.buf) > 0 {
		_, err := lw.w.Write(lw.buf)
		lw.buf = lw.buf[:0]
		if err != nil {
			return errViewerGone
		}
	}
	if err := lw.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return errViewerGone
	}
	return nil
}
