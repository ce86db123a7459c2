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

// FuzzAgentFrame sends arbitrary frames to the orchestrator (internal/proto's
// FuzzDecode covers the decoder alone):
//
//   - as the first frame of a new connection: it is refused with one of the
//     protocol's close codes, or, being an auth frame, answered;
//   - when it is a valid frame a registered agent may send that is handled
//     in memory (heartbeats, agent.status, and every report about a job,
//     refused since the fuzzing agent holds none), on a registered
//     connection: it is handled, and the connection stays served (a probe
//     that must be answered follows).
//
// So an input costs no store work: under the fuzzer's coverage
// instrumentation the store is slow.
// Proves B77 (docs/behaviours.md).
func FuzzAgentFrame(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, m := range []proto.Message{
		&proto.Heartbeat{Time: now, ActiveJobs: 1},
		&proto.AgentStatus{Draining: true},
		&proto.JobAck{JobID: "j1", LeaseEpoch: 1},
		&proto.JobReject{JobID: "j1", LeaseEpoch: 1, Reason: proto.RejectBusy},
		&proto.JobHeartbeat{JobID: "j1", LeaseEpoch: 2},
		&proto.Auth{Token: "kat_x", ProtocolVersion: proto.Version},
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
		`{"type":"register","data":{"agent_id":"x","max_jobs":1}}`, "\xff\xfe",
		`{"type":"job.status","seq":18446744073709551615,"data":{"job_id":"j","lease_epoch":9223372036854775807,"status":"running"}}`} {
		f.Add([]byte(s))
	}
	cfg := fastConfig()
	cfg.MessagesPerSecond, cfg.MessageBurst = 1e6, 1e6 // the fuzzer sends as fast as it can
	h := start(f, storetest.Backends[0], options{cfg: cfg})
	_, secret := h.token(store.AgentTokenSpec{})
	firstFrame := map[int]bool{proto.CloseUnauthorized: true, proto.CloseInvalidMessage: true, proto.CloseAuthFailed: true,
		proto.CloseProtocol: true, int(websocket.StatusMessageTooBig): true}
	live := dial(f, h.url)
	live.handshake(secret, reg{id: "fuzz"})
	var lastSeq uint64
	// The frames a registered connection handles without the store (the
	// others end the connection, or take the store's refusal path, which
	// the other tests cover and which is slow under instrumentation).
	// Reports about jobs are refused in memory too: the fuzzing agent
	// holds none.
	inMemory := map[string]bool{proto.TypeHeartbeat: true, proto.TypeAgentStatus: true, proto.TypeJobHeartbeat: true, proto.TypeLog: true,
		proto.TypeJobAck: true, proto.TypeJobReject: true, proto.TypeJobStatus: true, proto.TypeStepStatus: true}
	f.Fuzz(func(t *testing.T, frame []byte) {
		fresh := dial(t, h.url)
		if err := fresh.ws.Write(bg, websocket.MessageText, frame); err == nil {
			select {
			case m := <-fresh.in:
				if _, ok := m.(*proto.AuthOK); !ok {
					t.Fatalf("frame %q before auth was answered with %s", frame, m.Type())
				}
			case <-fresh.done:
				if code, reason := fresh.closed(); !firstFrame[code] {
					t.Fatalf("frame %q before auth closed the connection with %d %q", frame, code, reason)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no answer to frame %q before auth", frame)
			}
		}
		fresh.ws.CloseNow()

		seq, m, err := proto.Decode(frame)
		if err != nil || !inMemory[m.Type()] || (proto.Durable(m.Type()) && seq <= lastSeq) {
			return
		}
		live.t = t
		if proto.Durable(m.Type()) {
			lastSeq = seq
		}
		probe, _ := proto.Encode(0, &proto.JobHeartbeat{JobID: "probe", LeaseEpoch: 1})
		for _, b := range [][]byte{frame, probe} {
			if err := live.ws.Write(bg, websocket.MessageText, b); err != nil {
				t.Fatalf("the registered connection broke: %v", err)
			}
		}
		for {
			select {
			case e := <-live.errs:
				if e.Code == proto.ErrStaleLease && strings.Contains(e.Message, "job probe") {
					return // still served
				}
			case <-live.in: // a dispatch or drain the frame caused
			case <-live.done:
				code, reason := live.closed()
				t.Fatalf("frame %q closed a registered connection with %d %q", frame, code, reason)
			case <-time.After(30 * time.Second):
				t.Fatalf("no answer to frame %q", frame)
			}
		}
	})
}
