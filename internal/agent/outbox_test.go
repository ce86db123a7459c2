package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
)

func lines(first, n int) []proto.LogLine {
	out := make([]proto.LogLine, n)
	for i := range out {
		out[i] = proto.LogLine{Seq: uint64(first + i), Stream: proto.StreamStdout, Text: fmt.Sprint("l", first+i)}
	}
	return out
}

// drain takes every frame the outbox would write now.
func drainOutbox(o *outbox) (seqs []uint64, msgs []proto.Message) {
	for {
		seq, m, ok := o.next()
		if !ok {
			return seqs, msgs
		}
		seqs, msgs = append(seqs, seq), append(msgs, m)
	}
}

func TestOutboxCoalescesUnsentLogs(t *testing.T) {
	o := newOutbox(100, 10, time.Now)
	o.addStatus("j", 1, &proto.JobStatus{JobID: "j", LeaseEpoch: 1, Status: kiln.JobRunning})
	o.addLog("j", 1, 0, lines(1, 4))
	o.addLog("j", 1, 0, lines(5, 4))  // joins the previous frame
	o.addLog("j", 1, 0, lines(9, 4))  // fills it to 10, then a new frame
	o.addLog("k", 1, 0, lines(1, 2))  // another job: its own frame
	o.addLog("j", 1, 0, lines(13, 1)) // j's newest frame is still open
	o.addLog("j", 1, 1, lines(1, 1))  // another step: a new frame
	seqs, msgs := drainOutbox(o)
	if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("seqs %v", seqs)
	}
	var got []string
	for _, m := range msgs[1:] {
		l := m.(*proto.Log)
		got = append(got, fmt.Sprintf("%s/%d:%d-%d", l.JobID, l.Step, l.Lines[0].Seq, l.Lines[len(l.Lines)-1].Seq))
	}
	if strings.Join(got, " ") != "j/0:1-10 j/0:11-13 k/0:1-2 j/1:1-1" {
		t.Fatalf("frames %v", got)
	}
	// A written frame is frozen: new lines go to a new frame.
	o.addLog("j", 1, 1, lines(2, 1))
	if seqs, _ := drainOutbox(o); fmt.Sprint(seqs) != "[6]" {
		t.Fatalf("after writing, seqs %v", seqs)
	}
}

func TestOutboxAckAndReplay(t *testing.T) {
	o := newOutbox(100, 10, time.Now)
	for i := range 5 {
		o.addStatus("j", 1, &proto.StepStatus{JobID: "j", LeaseEpoch: 1, Index: i, Status: kiln.StepRunning})
	}
	drainOutbox(o)
	if got := o.ack(3); got != 3 {
		t.Fatalf("acked %d", got)
	}
	o.offline(time.Now())
	o.online(time.Now())
	if seqs, _ := drainOutbox(o); fmt.Sprint(seqs) != "[4 5]" {
		t.Fatalf("replayed %v", seqs)
	}
	// An ack beyond what was written stops at what was written.
	o.addStatus("j", 1, &proto.StepStatus{JobID: "j", LeaseEpoch: 1, Index: 9, Status: kiln.StepRunning})
	if got := o.ack(99); got != 5 || o.size() != 1 {
		t.Fatalf("acked %d, size %d", got, o.size())
	}
}

// A status's leading control frame (a job's ack) comes out with its first
// write only: a replay after a reconnect sends the status alone.
func TestOutboxLeadingFrameGoesOutOnce(t *testing.T) {
	o := newOutbox(100, 10, time.Now)
	ack := &proto.JobAck{JobID: "j", LeaseEpoch: 1}
	o.addStatusAfter("j", 1, ack, &proto.JobStatus{JobID: "j", LeaseEpoch: 1, Status: kiln.JobRunning})
	seq, before, m, ok := o.nextAfter()
	if !ok || seq != 1 || before != ack || m.Type() != proto.TypeJobStatus {
		t.Fatalf("first write: %d %v %v %v", seq, before, m, ok)
	}
	o.offline(time.Now())
	o.online(time.Now())
	seq, before, _, ok = o.nextAfter()
	if !ok || seq != 1 || before != nil {
		t.Fatalf("replay: seq %d, before %v, ok %v", seq, before, ok)
	}
}

func TestOutboxOverflowKeepsStatusesAndMarksGap(t *testing.T) {
	lost := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	now := lost.Add(45 * time.Second)
	o := newOutbox(4, 10, func() time.Time { return now })
	o.offline(lost)
	o.addStatus("j", 1, &proto.StepStatus{JobID: "j", LeaseEpoch: 1, Index: 0, Status: kiln.StepRunning})
	for i := range 10 {
		o.addLog("j", 1, 0, lines(1+10*i, 10))
	}
	o.addStatus("j", 1, &proto.StepStatus{JobID: "j", LeaseEpoch: 1, Index: 0, Status: kiln.StepSuccess})
	// Full frames leave no room for a marker, so the first dropped frame
	// stays as the marker-only frame that later drops merge into.
	if o.size() != 4 || o.dropped != 90 {
		t.Fatalf("size %d, dropped %d", o.size(), o.dropped)
	}
	o.online(now)
	_, msgs := drainOutbox(o)
	var text []string
	for _, m := range msgs {
		if l, ok := m.(*proto.Log); ok {
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			for _, ln := range l.Lines {
				text = append(text, fmt.Sprintf("%d:%s", ln.Seq, ln.Text))
			}
		}
	}
	want := "1:--- kiln agent: the connection to the orchestrator was lost for 45s; 90 log lines were dropped ---"
	if len(text) != 11 || text[0] != want || !strings.HasPrefix(text[1], "91:") {
		t.Fatalf("lines %v", text)
	}
	if msgs[0].Type() != proto.TypeStepStatus || msgs[len(msgs)-1].Type() != proto.TypeStepStatus {
		t.Fatal("a status was dropped")
	}
}

func TestOutboxGapWithoutLaterFrameStaysAsMarker(t *testing.T) {
	o := newOutbox(3, 10, time.Now)
	o.addLog("j", 1, 0, lines(1, 10))
	o.addStatus("j", 1, &proto.StepStatus{JobID: "j", LeaseEpoch: 1, Index: 0, Status: kiln.StepSuccess})
	o.addStatus("j", 1, &proto.StepStatus{JobID: "j", LeaseEpoch: 1, Index: 1, Status: kiln.StepRunning})
	o.addLog("j", 1, 1, lines(1, 10)) // over the bound: step 0's lines go
	_, msgs := drainOutbox(o)
	l := msgs[0].(*proto.Log)
	if len(msgs) != 4 || len(l.Lines) != 1 || l.Lines[0].Stream != proto.StreamSystem || l.Lines[0].Seq != 1 ||
		!strings.Contains(l.Lines[0].Text, "the orchestrator fell behind; 10 log lines were dropped") {
		t.Fatalf("frames %+v", msgs)
	}
}

func TestOutboxMarkerAvoidsWrittenSeqs(t *testing.T) {
	o := newOutbox(2, 5, time.Now)
	o.addLog("j", 1, 0, lines(1, 5))
	drainOutbox(o)                   // lines 1-5 written, not acknowledged
	o.addLog("j", 1, 0, lines(6, 5)) // 6-10
	o.addLog("j", 1, 0, lines(11, 5))
	o.addLog("j", 1, 0, lines(16, 5)) // everything goes but the last frame
	_, msgs := drainOutbox(o)
	// Lines 1-5 keep a marker of their own at seq 1, written only in a
	// replay; the never-written lines 6-20 get one at seq 6.
	first := msgs[0].(*proto.Log).Lines[0]
	if len(msgs) != 1 || first.Seq != 6 || !strings.Contains(first.Text, "15 log lines were dropped") {
		t.Fatalf("frames %+v", msgs)
	}
	o.offline(time.Now())
	o.online(time.Now())
	_, msgs = drainOutbox(o)
	first = msgs[0].(*proto.Log).Lines[0]
	if len(msgs) != 2 || first.Seq != 1 || !strings.Contains(first.Text, "5 log lines were dropped") {
		t.Fatalf("replay %+v", msgs)
	}
}

func TestOutboxDiscard(t *testing.T) {
	o := newOutbox(10, 10, time.Now)
	o.addLog("j", 1, 0, lines(1, 3))
	o.addLog("k", 1, 0, lines(1, 3))
	o.discard("j")
	o.addLog("j", 1, 0, lines(4, 3))
	if o.addStatus("j", 1, &proto.JobStatus{JobID: "j", LeaseEpoch: 1, Status: kiln.JobCancelled}) != 0 {
		t.Fatal("a discarded job's status was queued")
	}
	_, msgs := drainOutbox(o)
	if len(msgs) != 1 || msgs[0].(*proto.Log).JobID != "k" {
		t.Fatalf("frames %+v", msgs)
	}
	o.forget("j")
	o.addLog("j", 1, 0, lines(7, 1))
	if !o.holds("j") {
		t.Fatal("frames after forget were discarded")
	}
}

// FuzzOutbox runs random sequences of reports, writes, acks, reconnects and
// drops against a model orchestrator that stores every frame written to it
// (dropping lines whose seq it already holds) and checks that no status is
// ever lost, every frame is valid, the bound holds, and every line missing
// from a step's stored log is accounted for by a stored gap marker.
// Proves B51 (docs/behaviours.md).
func FuzzOutbox(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 2, 3, 1, 1, 4, 0, 1, 1})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 5, 1, 1, 1})
	f.Add([]byte{1, 2, 1, 2, 3, 1, 2, 1, 2, 3, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Fuzz(fuzzOutboxBody)
}

func fuzzOutboxBody(t *testing.T, ops []byte) {
	{
		const steps = 3
		o := newOutbox(6, 4, time.Now)
		next := [steps]int{1, 1, 1}
		stored := [steps]map[uint64]string{{}, {}, {}}
		var statuses, gotStatuses int
		write := func() {
			var last uint64
			for {
				seq, m, ok := o.next()
				if !ok {
					return
				}
				if seq <= last {
					t.Fatalf("seq %d after %d", seq, last)
				}
				last = seq
				if err := m.Validate(); err != nil {
					t.Fatalf("invalid frame: %v", err)
				}
				l, ok := m.(*proto.Log)
				if !ok {
					gotStatuses++ // replays count again; compared as ≥ below
					continue
				}
				for _, ln := range l.Lines {
					if _, dup := stored[l.Step][ln.Seq]; !dup {
						stored[l.Step][ln.Seq] = ln.Text
					}
				}
			}
		}
		for i := 0; i < len(ops); i++ {
			op := ops[i] % 6
			arg := 0
			if i+1 < len(ops) {
				arg = int(ops[i+1])
			}
			switch op {
			case 0, 1:
				s := arg % steps
				n := 1 + arg%7
				o.addLog("j", 1, s, lines(next[s], n))
				next[s] += n
				i++
			case 2:
				statuses++
				o.addStatus("j", 1, &proto.StepStatus{JobID: "j", LeaseEpoch: 1, Index: arg % steps, Status: kiln.StepRunning})
				i++
			case 3:
				write()
			case 4:
				o.ack(uint64(arg))
				i++
			case 5:
				o.offline(time.Now())
				o.online(time.Now())
			}
			if o.size() > o.maxFrames {
				for _, e := range o.entries {
					if e.status == nil && len(e.lines) > 0 {
						t.Fatalf("over the bound with a droppable frame: %d frames", o.size())
					}
				}
			}
		}
		o.offline(time.Now())
		o.online(time.Now())
		write()
		if gotStatuses < statuses {
			t.Fatalf("%d statuses reported, %d written", statuses, gotStatuses)
		}
		for s := range steps {
			missing, reported := 0, 0
			for seq := 1; seq < next[s]; seq++ {
				text, ok := stored[s][uint64(seq)]
				switch {
				case !ok:
					missing++
				case strings.HasPrefix(text, "--- kiln agent:"):
					missing++ // the marker took a lost line's seq
					var n int
					if _, err := fmt.Sscanf(text[strings.Index(text, "; ")+2:], "%d log line", &n); err != nil {
						t.Fatalf("marker %q: %v", text, err)
					}
					reported += n
				}
			}
			if missing > reported {
				t.Fatalf("step %d: %d lines missing, markers report %d", s, missing, reported)
			}
		}
	}
}
