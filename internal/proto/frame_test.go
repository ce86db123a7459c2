package proto

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

func validMessages() []Message {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	code := 0
	return []Message{
		&Auth{Token: "kat_abc", ProtocolVersion: Version, AgentVersion: "dev"},
		&Register{AgentID: "agent-1", AgentSecret: "kas_0123456789abcdefghijklmnopqrstuv", Labels: []string{"linux", "amd64"}, MaxJobs: 2,
			InFlight: []InFlight{{JobID: "j1", RunID: "r1", LeaseEpoch: 3, Started: true}}, Hostname: "h", OS: "linux", Arch: "amd64"},
		&Heartbeat{Time: now, ActiveJobs: 1},
		&AgentStatus{ActiveJobs: 0, Draining: true},
		&JobAck{JobID: "j1", LeaseEpoch: 1},
		&JobReject{JobID: "j1", LeaseEpoch: 1, Reason: RejectBusy},
		&JobStatus{JobID: "j1", LeaseEpoch: 1, Status: kiln.JobSuccess, Outputs: map[string]string{"version": "1.2"}, Time: now},
		&StepStatus{JobID: "j1", LeaseEpoch: 1, Index: -1, Name: "checkout", Status: kiln.StepSuccess, ExitCode: &code, StartedAt: &now},
		&Log{JobID: "j1", LeaseEpoch: 1, Step: 0, Lines: []LogLine{{Seq: 1, Stream: StreamStdout, Text: "hello", TimeMS: now.UnixMilli()}, {Seq: 2, Stream: StreamStderr, Text: "oops", TimeMS: now.UnixMilli()}}},
		&JobHeartbeat{JobID: "j1", LeaseEpoch: 1},
		&AuthOK{ConnectionID: "c1"},
		&RegisterAck{AgentID: "agent-1", Labels: []string{"amd64", "linux"}, MaxJobs: 2, HeartbeatIntervalMS: 30000},
		&Dispatch{JobID: "j1", RunID: "r1", LeaseEpoch: 1, Attempt: 1, Spec: JobSpec{Name: "build", Steps: []Step{{Name: "s", Run: "echo hi", Retry: &Retry{MaxAttempts: 3}}}}},
		&Cancel{JobID: "j1", Force: true, Reason: "cancelled by user"},
		&Ack{Seq: 42},
		&Drain{},
		&Error{Code: ErrAgentIDInUse, Message: "agent id agent-1 is in use"},
		&Coordinators{Coordinators: []string{"https://a.example.test", "https://b.example.test"}},
	}
}

func TestRoundTripEveryMessage(t *testing.T) {
	for _, m := range validMessages() {
		var seq uint64
		if Durable(m.Type()) {
			seq = 7
		}
		b, err := Encode(seq, m)
		if err != nil {
			t.Fatalf("%s: encode: %v", m.Type(), err)
		}
		gotSeq, got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: decode %s: %v", m.Type(), b, err)
		}
		if gotSeq != seq || !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip changed the message:\n got %#v\nwant %#v", m.Type(), got, m)
		}
	}
}

func TestEncodeRefusesWrongSeq(t *testing.T) {
	if _, err := Encode(0, &Log{}); err == nil {
		t.Error("a durable message without seq was encoded")
	}
	if _, err := Encode(3, &Heartbeat{}); err == nil {
		t.Error("a heartbeat with a seq was encoded")
	}
}

// Frames that do not validate are refused with a sentence naming what is
// wrong; metadata with control characters among them.
// Proves B115 (docs/behaviours.md).
func TestDecodeRefusesBadFrames(t *testing.T) {
	cases := []struct {
		name, frame, code, msg string
	}{
		{"not json", `hello`, ErrInvalidMessage, "syntax error"},
		{"truncated", `{"type":"heartbeat","data":{"active_jobs":1`, ErrInvalidMessage, "not a JSON object"},
		{"array", `[1,2]`, ErrInvalidMessage, "must be"},
		{"unknown type", `{"type":"launch.missiles"}`, ErrInvalidMessage, "unknown message type"},
		{"missing type", `{"data":{}}`, ErrInvalidMessage, "unknown message type"},
		{"durable without seq", `{"type":"log","data":{"job_id":"j","lease_epoch":1,"step":0,"lines":[{"seq":1,"stream":"stdout","text":"x"}]}}`, ErrInvalidMessage, "no seq"},
		{"wrong field type", `{"type":"job.ack","data":{"job_id":5,"lease_epoch":1}}`, ErrInvalidMessage, `"job_id" must be string`},
		{"missing job id", `{"type":"job.ack","data":{"lease_epoch":1}}`, ErrInvalidMessage, "job_id is missing"},
		{"zero epoch", `{"type":"job.ack","data":{"job_id":"j"}}`, ErrInvalidMessage, "lease_epoch"},
		{"bad id chars", `{"type":"job.ack","data":{"job_id":"a b","lease_epoch":1}}`, ErrInvalidMessage, "may only contain"},
		{"bad status", `{"type":"job.status","seq":1,"data":{"job_id":"j","lease_epoch":1,"status":"queued"}}`, ErrInvalidMessage, "not running, success"},
		{"out of order lines", `{"type":"log","seq":1,"data":{"job_id":"j","lease_epoch":1,"step":0,"lines":[{"seq":2,"stream":"stdout","text":"x"},{"seq":1,"stream":"stdout","text":"y"}]}}`, ErrInvalidMessage, "does not follow"},
		{"empty log", `{"type":"log","seq":1,"data":{"job_id":"j","lease_epoch":1,"step":0,"lines":[]}}`, ErrInvalidMessage, "1 to"},
		{"bad stream", `{"type":"log","seq":1,"data":{"job_id":"j","lease_epoch":1,"step":0,"lines":[{"seq":1,"stream":"stdin","text":"x"}]}}`, ErrInvalidMessage, "stream"},
		{"step out of range", `{"type":"step.status","seq":1,"data":{"job_id":"j","lease_epoch":1,"index":-2,"name":"x","status":"running"}}`, ErrInvalidMessage, "out of range"},
		{"bad labels", `{"type":"register","data":{"agent_id":"a","agent_secret":"kas_0123456789abcdefghijklmnopqrstuv","labels":["a,b"],"max_jobs":1}}`, ErrInvalidMessage, "labels"},
		{"zero capacity", `{"type":"register","data":{"agent_id":"a","agent_secret":"kas_0123456789abcdefghijklmnopqrstuv","labels":[],"max_jobs":0}}`, ErrInvalidMessage, "max_jobs"},
		{"escape in hostname", `{"type":"register","data":{"agent_id":"a","agent_secret":"kas_0123456789abcdefghijklmnopqrstuv","labels":[],"max_jobs":1,"hostname":"box\u001b[2J"}}`, ErrInvalidMessage, "hostname holds a control"},
		{"bidi override in version", `{"type":"register","data":{"agent_id":"a","agent_secret":"kas_0123456789abcdefghijklmnopqrstuv","labels":[],"max_jobs":1,"version":"1.0\u202e"}}`, ErrInvalidMessage, "version holds a control"},
		{"newline in agent_version", `{"type":"auth","data":{"token":"kat_x","protocol_version":1,"agent_version":"1\nlevel=ERROR"}}`, ErrInvalidMessage, "agent_version holds a control"},
		{"no agent secret", `{"type":"register","data":{"agent_id":"a","labels":[],"max_jobs":1}}`, ErrInvalidMessage, "agent_secret is missing"},
		{"short agent secret", `{"type":"register","data":{"agent_id":"a","agent_secret":"kas_short","labels":[],"max_jobs":1}}`, ErrInvalidMessage, "agent_secret must be"},
		{"agent secret with a space", `{"type":"register","data":{"agent_id":"a","agent_secret":"kas_0123456789 abcdefghijklmnopqrstuv","labels":[],"max_jobs":1}}`, ErrInvalidMessage, "agent_secret may only"},
		{"too many coordinators", `{"type":"coordinators","data":{"coordinators":[` + strings.Repeat(`"u",`, MaxCoordinators) + `"u"]}}`, ErrInvalidMessage, "coordinators (at most 64)"},
		{"auth without token", `{"type":"auth","data":{"protocol_version":1}}`, ErrInvalidMessage, "token is missing"},
		{"trailing garbage", `{"type":"drain"} x`, ErrInvalidMessage, "syntax error"},
		{"oversized", `{"type":"heartbeat","data":{"x":"` + strings.Repeat("a", MaxFrameBytes) + `"}}`, ErrTooLarge, "exceeds"},
	}
	for _, c := range cases {
		_, _, err := Decode([]byte(c.frame))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%s: err = %v, want a DecodeError", c.name, err)
			continue
		}
		if de.Code != c.code || !strings.Contains(de.Message, c.msg) {
			t.Errorf("%s: got %s %q, want %s containing %q", c.name, de.Code, de.Message, c.code, c.msg)
		}
		if len(de.Message) > 300 {
			t.Errorf("%s: message echoes too much input (%d bytes)", c.name, len(de.Message))
		}
	}
}

// Proves B77 (docs/behaviours.md).
func FuzzDecode(f *testing.F) {
	for _, m := range validMessages() {
		var seq uint64
		if Durable(m.Type()) {
			seq = 1
		}
		b, err := Encode(seq, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"type":"log","seq":1,"data":null}`))
	f.Add([]byte(`{"type":"register","data":{"agent_id":"\u0000","labels":["x"],"max_jobs":1e309}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, m, err := Decode(b)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("non-DecodeError %T: %v", err, err)
			}
			return
		}
		// Whatever decodes must re-encode and decode to the same message.
		out, err := Encode(seq, m)
		if err != nil {
			t.Fatalf("decoded %s does not re-encode: %v", m.Type(), err)
		}
		if _, m2, err := Decode(out); err != nil || m2.Type() != m.Type() {
			t.Fatalf("re-encoded %s does not decode: %v", m.Type(), err)
		}
	})
}
