package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// FuzzAgentFrame sends arbitrary frames from a registered agent. Whatever
// arrives, the orchestrator either handles it and keeps serving the
// connection, or refuses it with an error frame and one of the protocol's
// close codes; it never fails otherwise. (internal/proto's FuzzDecode
// covers the decoder alone.)
func FuzzAgentFrame(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, m := range []proto.Message{
		&proto.Heartbeat{Time: now, ActiveJobs: 1},
		&proto.AgentStatus{Draining: true},
		&proto.JobAck{JobID: "j1", LeaseEpoch: 1},
		&proto.JobReject{JobID: "j1", LeaseEpoch: 1, Reason: proto.RejectBusy},
		&proto.JobHeartbeat{JobID: "j1", LeaseEpoch: 2},
	} {
		b, _ := proto.Encode(0, m)
		f.Add(b)
	}
	for _, m := range []proto.Message{
		&proto.JobStatus{JobID: "j1", LeaseEpoch: 1, Status: kiln.JobSuccess, Outputs: map[string]string{"a": "b"}},
		&proto.StepStatus{JobID: "j1", LeaseEpoch: 1, Index: -1, Name: "checkout", Status: kiln.StepSuccess},
		&proto.Log{JobID: "j1", LeaseEpoch: 1, Step: 0, Lines: []proto.LogLine{{Seq: 1, Stream: "stdout", Text: "x"}}},
	} {
		b, _ := proto.Encode(1<<40, m)
		f.Add(b)
	}
	for _, s := range []string{``, `{}`, `null`, `{"type":"ack","data":{"seq":1}}`, `{"type":"log","seq":1,"data":{"lines":[]}}`,
		`{"type":"register","data":{"agent_id":"x","max_jobs":1}}`, "\xff\xfe", `{"type":"job.status","seq":18446744073709551615,"data":{"job_id":"j","lease_epoch":9223372036854775807,"status":"running"}}`} {
		f.Add([]byte(s))
	}
	cfg := fastConfig()
	cfg.MessagesPerSecond, cfg.MessageBurst = 1e6, 1e6 // the fuzzer sends as fast as it can
	h := start(f, storetest.Backends[0], options{cfg: cfg})
	_, secret := h.token(store.AgentTokenSpec{})
	allowed := map[int]bool{proto.CloseInvalidMessage: true, int(websocket.StatusMessageTooBig): true, proto.CloseRateLimited: true}
	var c *client
	f.Fuzz(func(t *testing.T, frame []byte) {
		if c == nil {
			c = dial(t, h.url)
			c.handshake(secret, reg{id: "fuzz"})
		}
		c.t = t
		if err := c.ws.Write(bg, websocket.MessageText, frame); err != nil {
			c = nil
			return
		}
		// A probe the orchestrator must answer while it serves the
		// connection: a job heartbeat for a job the agent does not hold.
		probe, _ := proto.Encode(0, &proto.JobHeartbeat{JobID: "probe", LeaseEpoch: 1})
		if err := c.ws.Write(bg, websocket.MessageText, probe); err != nil {
			c = nil
			return
		}
		for {
			select {
			case e := <-c.errs:
				if e.Code == proto.ErrStaleLease && containsProbe(e.Message) {
					return // still served
				}
				continue // the frame's own answer
			case <-c.done:
				code, reason := c.closed()
				if !allowed[code] {
					t.Fatalf("frame %q closed the connection with %d %q", frame, code, reason)
				}
				c = nil
				return
			case <-c.in:
				continue // a dispatch or drain the frame caused
			case <-time.After(5 * time.Second):
				t.Fatalf("no answer to frame %q", frame)
			}
		}
	})
}

func containsProbe(msg string) bool { return strings.Contains(msg, "job probe") }
