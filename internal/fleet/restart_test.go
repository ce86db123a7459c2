package fleet

import (
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The orchestrator stops while a step prints numbered lines; a new process
// starts over the same database and log files; the agent reconnects, lists
// its job, replays what was not acknowledged (overlapping lines already
// stored) and finishes. The stored log holds every line 1..N exactly once
// and the job succeeds.
func TestRestartKeepsEveryLineOnce(t *testing.T) {
	const n, perFrame = 400, 10
	dbURL, logDir := storetest.SQLiteURL(t), t.TempDir()
	sqlite := storetest.Backends[0]
	h1 := start(t, sqlite, options{cfg: fastConfig(), dbURL: dbURL, logDir: logDir})
	_, secret := h1.token(store.AgentTokenSpec{})
	c, _ := h1.connect(secret, reg{id: "printer"})
	runID, jobs := h1.run(job("count", "linux"))
	d := expect[*proto.Dispatch](c)
	c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: 1})
	c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})

	// The agent's buffer: every durable frame by seq until acknowledged.
	sent := map[uint64]proto.Message{}
	durable := func(cl *client, m proto.Message) {
		cl.send(m)
		sent[cl.seq] = m
	}
	sent[c.seq] = &proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()}
	frame := func(from int) *proto.Log {
		m := &proto.Log{JobID: d.JobID, LeaseEpoch: 1, Step: 0}
		for i := from; i < from+perFrame && i <= n; i++ {
			m.Lines = append(m.Lines, proto.LogLine{Seq: uint64(i), Stream: "stdout", Text: "line " + itoa(uint64(i)), TimeMS: int64(i)})
		}
		return m
	}
	next := 1
	for ; next <= 150; next += perFrame {
		durable(c, frame(next))
	}
	c.waitAck(c.seq)
	for ; next <= 200; next += perFrame { // in flight when the orchestrator stops
		durable(c, frame(next))
	}
	h1.stop()
	if code, _ := c.closed(); code != proto.CloseGoingAway && code != -1 {
		t.Fatalf("close %d", code)
	}
	acked := c.acked.Load()

	h2 := start(t, sqlite, options{cfg: fastConfig(), dbURL: dbURL, logDir: logDir})
	if j := h2.job(jobs["count"]); j.Status != kiln.JobRecovering {
		t.Fatalf("after the restart the job is %s, want recovering", j.Status)
	}
	c2 := dial(t, h2.url)
	ack := c2.handshake(secret, reg{id: "printer", inFlight: []proto.InFlight{{JobID: d.JobID, RunID: runID, LeaseEpoch: 1, Started: true}}})
	if len(ack.Recovered) != 1 || ack.Recovered[0] != d.JobID {
		t.Fatalf("register.ack %+v", ack)
	}
	// Replay from before the last acknowledgement, so some lines arrive
	// twice; then go on to the end.
	for seq := acked - 3; seq <= c.seq; seq++ {
		if m, ok := sent[seq]; ok {
			c2.sendSeq(seq, m)
		}
	}
	c2.seq = c.seq
	for ; next <= n; next += perFrame {
		durable(c2, frame(next))
	}
	c2.send(&proto.StepStatus{JobID: d.JobID, LeaseEpoch: 1, Index: 0, Name: "build", Status: kiln.StepSuccess})
	c2.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobSuccess, Time: time.Now()})
	c2.waitAck(c2.seq)
	h2.waitStatus(d.JobID, kiln.JobSuccess)

	lines, err := h2.logs.Read(logstore.Ref{RunID: runID, JobID: d.JobID, Epoch: 1, Step: 0}, 0, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != n {
		t.Fatalf("stored %d lines, want %d", len(lines), n)
	}
	for i, l := range lines {
		if l.Seq != uint64(i+1) || l.Text != "line "+itoa(uint64(i+1)) {
			t.Fatalf("line %d is %+v", i+1, l)
		}
	}
	if hw, _ := h2.db.Logs().HighWater(bg, d.JobID, 0); hw != n {
		t.Fatalf("the chunk index's high-water mark is %d, want %d", hw, n)
	}
}
