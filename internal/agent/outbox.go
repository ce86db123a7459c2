package agent

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/proto"
)

// The outbox holds the durable frames (job.status, step.status, log) from the
// moment a job reports them until the orchestrator acknowledges them. Each
// frame gets its seq when it enters and keeps it: a replay after a reconnect
// sends the same frames with the same seqs, in order.
//
// Log batches are coalesced: a batch for the step whose frame is the newest
// of its job, not yet written and with room left, joins that frame. So a
// writer that falls behind (or a dead connection) turns many small batches
// into few large frames, and the frame bound lasts longer.
//
// When the outbox holds more than maxFrames frames it drops the oldest log
// frame; statuses are never dropped (they are few and small, and losing one
// would leave a job or step unfinished forever). The dropped lines become a
// gap (gap.go): the next frame of the same step carries it, or, when the step
// has no later frame yet, the dropped frame stays behind as a marker-only
// frame (into which the step's next lines may still be coalesced, and later
// drops of the step merged). When a frame with a gap is written, its marker
// lines go before its own lines.
type outbox struct {
	now       func() time.Time
	maxFrames int
	maxLines  int

	mu      sync.Mutex
	entries []*entry // unacknowledged, in seq order
	seq     uint64   // the last seq given out
	sent    uint64   // the highest seq taken for writing on the current connection
	acked   uint64   // the highest seq acknowledged
	tail    map[string]*entry
	gaps    map[stepKey]*entry // each step's marker-only frame, if any
	closed  map[string]bool    // jobs whose frames are discarded
	lostAt  time.Time          // zero while connected
	dropped uint64             // log lines dropped, in total
	notify  chan struct{}
}

// stepKey names one step's log within one lease of a job.
type stepKey struct {
	job   string
	epoch int64
	step  int
}

type entry struct {
	seq    uint64
	job    string
	epoch  int64
	status proto.Message // *proto.JobStatus or *proto.StepStatus; nil for a log frame
	before proto.Message // a control frame written just before this one, the first time
	step   int
	lines  []proto.LogLine
	bytes  int
	gap    gap
	// sent freezes the frame: once written it is only ever written again
	// as it was (plus a gap marker), never grown.
	sent bool
}

func newOutbox(maxFrames, maxLines int, now func() time.Time) *outbox {
	return &outbox{
		now: now, maxFrames: maxFrames, maxLines: maxLines,
		tail: map[string]*entry{}, gaps: map[stepKey]*entry{}, closed: map[string]bool{},
		notify: make(chan struct{}, 1),
	}
}

// ready is signalled when frames were added.
func (o *outbox) ready() <-chan struct{} { return o.notify }

func (o *outbox) signal() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// addStatus queues a job.status or step.status (JobID and LeaseEpoch set) and
// returns its seq, or 0 if the job's frames are being discarded.
func (o *outbox) addStatus(job string, epoch int64, m proto.Message) uint64 {
	return o.addStatusAfter(job, epoch, nil, m)
}

// addStatusAfter is addStatus with a control frame (before, seq 0) that
// the first write of the status carries just ahead of it, in the same
// write(2): a job's acknowledgement, then its running status, read by the
// orchestrator at once. A replay does not repeat it.
func (o *outbox) addStatusAfter(job string, epoch int64, before, m proto.Message) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed[job] {
		return 0
	}
	o.seq++
	e := &entry{seq: o.seq, job: job, epoch: epoch, status: m, before: before}
	o.entries = append(o.entries, e)
	o.tail[job] = e
	o.trim()
	o.signal()
	return e.seq
}

// addLog queues log lines of one step; it takes ownership of lines.
func (o *outbox) addLog(job string, epoch int64, step int, lines []proto.LogLine) {
	if len(lines) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed[job] {
		return
	}
	key := stepKey{job, epoch, step}
	for len(lines) > 0 {
		e := o.tail[job]
		if e == nil || e.status != nil || e.step != step || e.epoch != epoch || e.sent || !o.fits(e, lines[0]) {
			o.seq++
			e = &entry{seq: o.seq, job: job, epoch: epoch, step: step}
			o.entries = append(o.entries, e)
			o.tail[job] = e
		} else if len(e.lines) == 0 {
			delete(o.gaps, key) // the marker-only frame gets lines after its markers
		}
		n := 0
		for n < len(lines) && o.fits(e, lines[n]) {
			e.bytes += len(lines[n].Text) + lineOverheadBytes
			e.lines = append(e.lines, lines[n])
			n++
		}
		lines = lines[n:]
	}
	o.trim()
	o.signal()
}

// fits reports whether one more line may join frame e (markers count as
// lines). An empty frame takes any line: lines are at most
// proto.MaxLineBytes.
func (o *outbox) fits(e *entry, l proto.LogLine) bool {
	if len(e.lines) == 0 {
		return len(e.gap) < o.maxLines
	}
	return len(e.lines)+len(e.gap) < o.maxLines && e.bytes+len(l.Text)+lineOverheadBytes <= maxFrameTextBytes
}

// trim drops the oldest log frames while the outbox is over its bound.
func (o *outbox) trim() {
	for len(o.entries) > o.maxFrames {
		i := slices.IndexFunc(o.entries, func(e *entry) bool { return e.status == nil && len(e.lines) > 0 })
		if i < 0 {
			return
		}
		o.drop(i)
	}
}

// drop turns the lines of frame i into a gap, carried by the step's next
// frame, else by its unwritten marker-only frame, else by frame i itself.
func (o *outbox) drop(i int) {
	e := o.entries[i]
	key := stepKey{e.job, e.epoch, e.step}
	o.dropped += uint64(len(e.lines))
	g := append(gap(nil), e.gap...)
	if e.sent {
		for k := range g {
			g[k].written = true // its markers were written with it
		}
	}
	g = append(g, gapRun{seq: e.lines[0].Seq, lines: len(e.lines), written: e.sent, lostAt: o.lostAt})
	limit := min(maxRuns, o.maxLines)

	var next *entry
	for _, f := range o.entries[i+1:] {
		if f.status == nil && f.job == e.job && f.epoch == e.epoch && f.step == e.step {
			next = f
			break
		}
	}
	for _, c := range []*entry{next, o.gaps[key]} {
		if c == nil || (len(c.lines) == 0 && c.sent) {
			// A written marker keeps its text: the orchestrator has it.
			continue
		}
		if merged := c.gap.merge(g, limit); len(c.lines)+len(merged) <= o.maxLines {
			c.gap = merged
			o.entries = slices.Delete(o.entries, i, i+1)
			if o.tail[e.job] == e {
				delete(o.tail, e.job)
			}
			return
		}
	}
	e.lines, e.bytes, e.gap = nil, 0, gap(nil).merge(g, limit)
	o.gaps[key] = e
}

// next takes the next frame to write on the current connection.
func (o *outbox) next() (seq uint64, m proto.Message, ok bool) {
	seq, _, m, ok = o.nextAfter()
	return seq, m, ok
}

// nextAfter is next with the control frame to write just before it, if
// any (addStatusAfter).
func (o *outbox) nextAfter() (seq uint64, before, m proto.Message, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := sort.Search(len(o.entries), func(i int) bool { return o.entries[i].seq > o.sent })
	if i == len(o.entries) {
		return 0, nil, nil, false
	}
	e := o.entries[i]
	o.sent, e.sent = e.seq, true
	before, e.before = e.before, nil
	if e.status != nil {
		return e.seq, before, e.status, true
	}
	lines := e.lines
	if len(e.gap) > 0 { // markers' seqs are below the frame's first line's
		lines = append(e.gap.markers(o.now()), e.lines...)
		for k := range e.gap {
			e.gap[k].written = true // their seqs are out now
		}
	}
	return e.seq, before, &proto.Log{JobID: e.job, LeaseEpoch: e.epoch, Step: e.step, Lines: lines}, true
}

// ack forgets every frame up to seq and returns the highest seq acknowledged
// so far. An ack for frames not yet written on this connection is a peer's
// mistake and does not reach past them.
func (o *outbox) ack(seq uint64) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	seq = min(seq, o.sent)
	o.acked = max(o.acked, seq)
	k := 0
	for k < len(o.entries) && o.entries[k].seq <= seq {
		e := o.entries[k]
		if o.tail[e.job] == e {
			delete(o.tail, e.job)
		}
		if len(e.lines) == 0 && e.status == nil {
			delete(o.gaps, stepKey{e.job, e.epoch, e.step})
		}
		o.entries[k] = nil
		k++
	}
	o.entries = o.entries[k:]
	return o.acked
}

func (o *outbox) ackedSeq() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked
}

// offline records that the connection was lost; frames dropped from now on
// say so in their gap marker.
func (o *outbox) offline(at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lostAt.IsZero() {
		o.lostAt = at
	}
}

// online starts a new connection: every unacknowledged frame is written again.
func (o *outbox) online(at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.lostAt.IsZero() {
		for _, e := range o.entries {
			for k, r := range e.gap {
				if !r.lostAt.IsZero() && r.backAt.IsZero() {
					e.gap[k].backAt = at
				}
			}
		}
	}
	o.lostAt = time.Time{}
	o.sent = 0
	o.signal()
}

// discard drops every frame of a job the agent no longer holds, and every
// frame it reports from now on, until forget.
func (o *outbox) discard(job string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed[job] = true
	o.entries = slices.DeleteFunc(o.entries, func(e *entry) bool { return e.job == job })
	delete(o.tail, job)
	for k := range o.gaps {
		if k.job == job {
			delete(o.gaps, k)
		}
	}
}

// forget ends a discard once the job's runner can report no more.
func (o *outbox) forget(job string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.closed, job)
}

// holds reports whether any frame of the job is unacknowledged.
func (o *outbox) holds(job string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.ContainsFunc(o.entries, func(e *entry) bool { return e.job == job })
}

// size is the number of unacknowledged frames.
func (o *outbox) size() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.entries)
}
