package fleet

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Malformed, oversized and out-of-order frames from a registered agent get
// a clear error and close the connection; the frame changes nothing (the
// agent's job only takes the ordinary disconnect path).
// Proves B77 (docs/behaviours.md).
func TestBadFrames(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxMessageBytes = 64 << 10
	h := start(t, storetest.Backends[0], options{cfg: cfg})
	_, secret := h.token(store.AgentTokenSpec{})
	success := func(seq uint64, d *proto.Dispatch) []byte {
		b, _ := proto.Encode(seq, &proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobSuccess, Time: time.Now()})
		return b
	}
	cases := []struct {
		name   string
		frame  func(c *client, d *proto.Dispatch) []byte
		binary bool
		want   string // in the error message
	}{
		{name: "not JSON", frame: func(*client, *proto.Dispatch) []byte { return []byte(`{"type":"job.status","seq":`) }, want: "not a JSON object"},
		{name: "unknown type", frame: func(*client, *proto.Dispatch) []byte { return []byte(`{"type":"job.explode","data":{}}`) }, want: "unknown message type"},
		{name: "invalid field", frame: func(c *client, d *proto.Dispatch) []byte {
			return []byte(`{"type":"job.status","seq":` + itoa(c.seq+1) + `,"data":{"job_id":"` + d.JobID + `","lease_epoch":1,"status":"bogus"}}`)
		}, want: "bogus"},
		{name: "wrong type of field", frame: func(c *client, d *proto.Dispatch) []byte {
			return []byte(`{"type":"job.status","seq":` + itoa(c.seq+1) + `,"data":{"job_id":"` + d.JobID + `","lease_epoch":"one","status":"success"}}`)
		}, want: "lease_epoch"},
		{name: "durable frame without seq", frame: func(c *client, d *proto.Dispatch) []byte {
			return []byte(`{"type":"job.status","data":{"job_id":"` + d.JobID + `","lease_epoch":1,"status":"success"}}`)
		}, want: "no seq"},
		{name: "orchestrator's message", frame: func(*client, *proto.Dispatch) []byte { return []byte(`{"type":"ack","data":{"seq":1}}`) }, want: "orchestrator sends"},
		{name: "out of order", frame: func(c *client, d *proto.Dispatch) []byte { return success(c.seq, d) }, want: "does not follow"},
		{name: "register again", frame: func(c *client, d *proto.Dispatch) []byte {
			b, _ := proto.Encode(0, &proto.Register{AgentID: c.id, AgentSecret: testSecret(c.id), MaxJobs: 1})
			return b
		}, want: "already sent"},
		{name: "binary", binary: true, frame: func(c *client, d *proto.Dispatch) []byte { return success(c.seq+1, d) }, want: "not binary"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "bad-" + itoa(uint64(i))
			c, _ := h.connect(secret, reg{id: id})
			_, jobs := h.run(job("j"+itoa(uint64(i)), "linux"))
			d := expect[*proto.Dispatch](c)
			c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: 1})
			c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
			c.waitAck(c.seq)
			typ := websocket.MessageText
			if tc.binary {
				typ = websocket.MessageBinary
			}
			if err := c.ws.Write(bg, typ, tc.frame(c, d)); err != nil {
				t.Fatal(err)
			}
			if e := c.errorFrame(); e.Code != proto.ErrInvalidMessage || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("error %+v, want INVALID_MESSAGE with %q", e, tc.want)
			}
			if code, _ := c.closed(); code != proto.CloseInvalidMessage {
				t.Fatalf("close %d", code)
			}
			// The job took the disconnect path; the bad frame did not
			// end it.
			h.waitStatus(jobs["j"+itoa(uint64(i))], kiln.JobRecovering)
		})
	}

	t.Run("oversized", func(t *testing.T) {
		c, _ := h.connect(secret, reg{id: "big"})
		_, jobs := h.run(job("big", "linux"))
		d := expect[*proto.Dispatch](c)
		c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: 1})
		c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
		c.waitAck(c.seq)
		lines := make([]proto.LogLine, 100)
		for i := range lines {
			lines[i] = proto.LogLine{Seq: uint64(i + 1), Stream: "stdout", Text: strings.Repeat("x", 1000)}
		}
		b, _ := proto.Encode(c.seq+1, &proto.Log{JobID: d.JobID, LeaseEpoch: 1, Step: 0, Lines: lines})
		_ = c.ws.Write(bg, websocket.MessageText, b)
		code, reason := c.closed()
		if code != int(websocket.StatusMessageTooBig) || !strings.Contains(reason, "read limited at") {
			t.Fatalf("close %d %q", code, reason)
		}
		h.waitStatus(jobs["big"], kiln.JobRecovering)
		if got, _ := h.logs.Read(logstore.Ref{RunID: d.RunID, JobID: d.JobID, Epoch: 1, Step: 0}, 0, 10); len(got) != 0 {
			t.Fatalf("an oversized frame stored %d lines", len(got))
		}
	})
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// An agent sending faster than its limits is slowed, then, past the grace,
// gets RATE_LIMITED and close 4008; heartbeats are exempt.
// Proves B77 (docs/behaviours.md).
func TestRateLimit(t *testing.T) {
	cfg := fastConfig()
	cfg.MessagesPerSecond, cfg.MessageBurst, cfg.RateLimitGrace = 50, 10, 200*time.Millisecond
	h := start(t, storetest.Backends[0], options{cfg: cfg})
	_, secret := h.token(store.AgentTokenSpec{})

	calm, _ := h.connect(secret, reg{id: "calm"})
	for i := 0; i < 500; i++ {
		calm.send(&proto.Heartbeat{Time: time.Now()})
	}
	h.run(job("j", "linux"))
	expect[*proto.Dispatch](calm) // still served

	noisy, _ := h.connect(secret, reg{id: "noisy"})
	for i := 0; i < 500; i++ {
		if err := noisy.ws.Write(bg, websocket.MessageText, []byte(`{"type":"agent.status","data":{"active_jobs":0}}`)); err != nil {
			break
		}
	}
	if e := noisy.errorFrame(); e.Code != proto.ErrRateLimited {
		t.Fatalf("error %+v", e)
	}
	if code, _ := noisy.closed(); code != proto.CloseRateLimited {
		t.Fatalf("close %d", code)
	}
	if st := h.f.Stats(); st.RateLimitCloses != 1 || st.Disconnects["rate_limited"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}
