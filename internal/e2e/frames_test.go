package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

// rawAgent is a hand-driven agent connection: the test writes frames,
// good or bad, and reads what the orchestrator answers.
type rawAgent struct {
	t      testing.TB
	ws     *websocket.Conn
	seq    uint64
	frames chan proto.Message
	done   chan struct{}
	err    error // why reading stopped, once done is closed
}

func dialRaw(t testing.TB, serverURL string) *rawAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(serverURL, "http")+proto.Path, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(proto.MaxFrameBytes)
	r := &rawAgent{t: t, ws: ws, frames: make(chan proto.Message, 64), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			_, b, err := ws.Read(bg)
			if err != nil {
				r.err = err
				return
			}
			_, m, err := proto.Decode(b)
			if err != nil {
				r.err = fmt.Errorf("the orchestrator sent a frame that does not decode: %v: %.200s", err, b)
				return
			}
			r.frames <- m
		}
	}()
	t.Cleanup(func() { ws.CloseNow(); <-r.done })
	return r
}

// write sends raw bytes as one frame.
func (r *rawAgent) write(typ websocket.MessageType, b []byte) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := r.ws.Write(ctx, typ, b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// send encodes m, with the next seq when it is durable.
func (r *rawAgent) send(m proto.Message) {
	r.t.Helper()
	var seq uint64
	if proto.Durable(m.Type()) {
		r.seq++
		seq = r.seq
	}
	b, err := proto.Encode(seq, m)
	if err != nil {
		r.t.Fatal(err)
	}
	r.write(websocket.MessageText, b)
}

// next returns the next frame that is not an ack.
func (r *rawAgent) next() proto.Message {
	r.t.Helper()
	for {
		select {
		case m := <-r.frames:
			if _, ok := m.(*proto.Ack); ok {
				continue
			}
			return m
		case <-r.done:
			r.t.Fatalf("the connection ended: %v", r.err)
		case <-time.After(20 * time.Second):
			r.t.Fatal("no frame from the orchestrator within 20s")
		}
	}
}

// nextWithin is the next frame that is not an ack, if one comes within d.
func (r *rawAgent) nextWithin(d time.Duration) (proto.Message, bool) {
	timeout := time.After(d)
	for {
		select {
		case m := <-r.frames:
			if _, ok := m.(*proto.Ack); ok {
				continue
			}
			return m, true
		case <-r.done:
			return nil, false
		case <-timeout:
			return nil, false
		}
	}
}

func expectFrame[T proto.Message](r *rawAgent) T {
	r.t.Helper()
	m := r.next()
	v, ok := m.(T)
	if !ok {
		r.t.Fatalf("got %s %+v, want %T", m.Type(), m, v)
	}
	return v
}

// handshake authenticates with token and registers id with labels.
func (r *rawAgent) handshake(token, id string, labels ...string) *proto.RegisterAck {
	r.t.Helper()
	r.send(&proto.Auth{Token: token, ProtocolVersion: proto.Version, AgentVersion: "raw"})
	expectFrame[*proto.AuthOK](r)
	r.send(&proto.Register{AgentID: id, AgentSecret: rawSecret(id), Labels: labels, MaxJobs: 1, OS: runtime.GOOS, Arch: runtime.GOARCH})
	return expectFrame[*proto.RegisterAck](r)
}

// refused waits for the error frame and the close that follow a refused
// frame, and returns them.
func (r *rawAgent) refused() (proto.Error, int, string) {
	r.t.Helper()
	var e proto.Error
	for {
		select {
		case m := <-r.frames:
			if pe, ok := m.(*proto.Error); ok {
				e = *pe
			}
			continue
		case <-r.done:
			// The reader queued every frame before the close ended it,
			// but select picks at random among ready cases: take those
			// still queued.
			for len(r.frames) > 0 {
				if pe, ok := (<-r.frames).(*proto.Error); ok {
					e = *pe
				}
			}
		case <-time.After(20 * time.Second):
			r.t.Fatal("the orchestrator did not close the connection within 20s")
		}
		var ce websocket.CloseError
		if !asCloseError(r.err, &ce) {
			r.t.Fatalf("the connection ended without a close frame: %v", r.err)
		}
		return e, int(ce.Code), ce.Reason
	}
}

func asCloseError(err error, ce *websocket.CloseError) bool {
	code := websocket.CloseStatus(err)
	if code == -1 {
		return false
	}
	ce.Code = code
	if s := err.Error(); strings.Contains(s, "reason = ") {
		ce.Reason = s[strings.Index(s, "reason = ")+len("reason = "):]
	}
	return true
}

// Malformed, oversized and out-of-order frames, bad tokens and late or
// missing handshakes, sent by strangers to a running server while a real
// agent runs a job: each gets a clear error and its connection closed
// with the documented code, and nothing else changes — the real agent's
// job runs on with its one dispatch, a status forged for it by another
// connection is refused, no run, job or agent appears, and the run ends
// as it would have.
// Proves B77 (docs/behaviours.md).
func TestBadFramesGetAClearErrorAndChangeNothingElse(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.Agents.MaxMessageBytes, c.Agents.AuthTimeout, c.Agents.RegisterTimeout = 64<<10, time.Second, time.Second
	})
	gate := filepath.Join(t.TempDir(), "gate")
	localRun(t, s, map[string]string{"steady": fmt.Sprintf(`on: push
jobs:
  steady:
    runs_on: [steady]
    steps:
      - run: echo started; while [ ! -f %s ]; do sleep 0.02; done; echo finished
`, gate)})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "steady", labels: "steady"})
	run := triggerOne(t, s.Client, "app")
	steady := waitJob(t, s.Client, run.ID, "steady", 30*time.Second, "running its step", func(j api.Job) bool {
		return j.Status == kiln.JobRunning && len(j.Steps) == 1 && j.Steps[0].Status == kiln.StepRunning
	})

	registered := func(r *rawAgent, id string) { r.handshake(secret, id, "stranger") }
	frame := func(typ string, seq uint64, data string) []byte {
		return []byte(fmt.Sprintf(`{"type":%q,"seq":%d,"data":%s}`, typ, seq, data))
	}
	status := func(seq uint64) []byte {
		return frame("job.status", seq, fmt.Sprintf(`{"job_id":%q,"lease_epoch":1,"status":"success","time":"2026-01-01T00:00:00Z"}`, steady.ID))
	}
	cases := []struct {
		name   string
		setup  func(r *rawAgent, id string)
		frame  func(r *rawAgent) []byte
		binary bool
		code   int
		errors string // the error frame's code ("" when none is sent)
		says   string // in the error frame's message, or the close reason
	}{
		{name: "not JSON before auth", frame: func(*rawAgent) []byte { return []byte(`{"type":"auth",`) },
			code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "not a JSON object"},
		{name: "register before auth", frame: func(*rawAgent) []byte { return registerFrame("x") },
			code: proto.CloseUnauthorized, errors: proto.ErrUnauthorized, says: "the first frame must be auth"},
		{name: "unknown token", frame: func(*rawAgent) []byte { return frame("auth", 0, `{"token":"kat_nope","protocol_version":1}`) },
			code: proto.CloseAuthFailed, errors: proto.ErrUnauthorized, says: "unknown, revoked or expired"},
		{name: "future protocol version", frame: func(*rawAgent) []byte {
			return frame("auth", 0, fmt.Sprintf(`{"token":%q,"protocol_version":99}`, secret))
		}, code: proto.CloseProtocol, errors: proto.ErrProtocol, says: "protocol version 99"},
		{name: "no auth in time", code: proto.CloseAuthTimeout, says: "no auth frame within"},
		{name: "heartbeat before register", setup: func(r *rawAgent, _ string) {
			r.send(&proto.Auth{Token: secret, ProtocolVersion: proto.Version})
			expectFrame[*proto.AuthOK](r)
		}, frame: func(*rawAgent) []byte {
			return frame("heartbeat", 0, `{"time":"2026-01-01T00:00:00Z","active_jobs":0}`)
		},
			code: proto.CloseInvalidMessage, errors: proto.ErrNotRegistered, says: "register must follow auth.ok"},
		{name: "malformed after register", setup: registered, frame: func(*rawAgent) []byte { return []byte(`{"type":"log","seq":1,"data":{"lines":[`) },
			code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "not a JSON object"},
		{name: "unknown type", setup: registered, frame: func(*rawAgent) []byte { return frame("job.explode", 0, `{}`) },
			code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "unknown message type"},
		{name: "invalid field", setup: registered, frame: func(*rawAgent) []byte {
			return frame("job.status", 1, fmt.Sprintf(`{"job_id":%q,"lease_epoch":1,"status":"exploded"}`, steady.ID))
		}, code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "exploded"},
		{name: "seq out of order", setup: func(r *rawAgent, id string) {
			registered(r, id)
			// A log for a job nobody holds is refused without closing;
			// its seq counts.
			r.write(websocket.MessageText, frame("log", 2, `{"job_id":"nobody","lease_epoch":1,"step":0,"lines":[{"seq":1,"stream":"stdout","text":"x","time_ms":1}]}`))
			if e := expectFrame[*proto.Error](r); e.Code != proto.ErrStaleLease {
				t.Fatalf("log for a job nobody holds: %+v", e)
			}
		}, frame: func(*rawAgent) []byte { return status(1) },
			code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "seq 1 does not follow seq 2"},
		{name: "register twice", setup: registered, frame: func(*rawAgent) []byte { return registerFrame("again") },
			code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "already sent"},
		{name: "orchestrator's message", setup: registered, frame: func(*rawAgent) []byte { return frame("ack", 0, `{"seq":1}`) },
			code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "orchestrator sends"},
		{name: "binary frame", setup: registered, binary: true, frame: func(*rawAgent) []byte { return status(1) },
			code: proto.CloseInvalidMessage, errors: proto.ErrInvalidMessage, says: "not binary"},
		{name: "oversized", setup: registered, frame: func(*rawAgent) []byte {
			// One byte over the limit: the orchestrator reads all of it
			// before refusing, so the refusal is not lost to a reset.
			f := func(n int) []byte {
				return frame("log", 1, fmt.Sprintf(`{"job_id":%q,"lease_epoch":1,"step":0,"lines":[{"seq":1,"stream":"stdout","text":%q,"time_ms":1}]}`,
					steady.ID, strings.Repeat("x", n)))
			}
			return f(64<<10 + 1 - len(f(0)))
		}, code: int(websocket.StatusMessageTooBig), says: "read limited at"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, s.URL)
			id := fmt.Sprintf("stranger-%d", i)
			if tc.setup != nil {
				tc.setup(r, id)
			}
			if tc.frame != nil {
				typ := websocket.MessageText
				if tc.binary {
					typ = websocket.MessageBinary
				}
				r.write(typ, tc.frame(r))
			}
			e, code, reason := r.refused()
			if code != tc.code || e.Code != tc.errors || !strings.Contains(e.Message+" "+reason, tc.says) {
				t.Fatalf("refused with error %+v and close %d %q; want error %q saying %q and close %d",
					e, code, reason, tc.errors, tc.says, tc.code)
			}
		})
	}

	// Reports about the steady agent's job from another agent's
	// connection — which names the job and its lease epoch correctly — are
	// refused (without closing) and change nothing: an ack, a reject
	// (which would requeue a running job), a step status and a final
	// status.
	t.Run("reports about a job another agent holds", func(t *testing.T) {
		r := dialRaw(t, s.URL)
		registered(r, "stranger-forger")
		job := fmt.Sprintf(`"job_id":%q,"lease_epoch":1`, steady.ID)
		for _, f := range [][]byte{
			frame("job.ack", 0, `{`+job+`}`),
			frame("job.reject", 0, `{`+job+`,"reason":"busy"}`),
			frame("step.status", 1, `{`+job+`,"index":0,"name":"x","status":"failed","exit_code":9}`),
			frame("job.status", 2, `{`+job+`,"status":"failed","error":"forged","time":"2026-01-01T00:00:00Z"}`),
		} {
			r.write(websocket.MessageText, f)
			m, ok := r.nextWithin(5 * time.Second)
			if e, isErr := m.(*proto.Error); !ok || !isErr || e.Code != proto.ErrStaleLease {
				t.Errorf("forged report %s: answered %+v, want an error %s", f, m, proto.ErrStaleLease)
			}
			if j := mustJob(t, getRun(t, s.Client, run.ID), "steady"); j.Status != kiln.JobRunning || j.Dispatches != 1 ||
				j.Steps[0].Status != kiln.StepRunning {
				t.Fatalf("forged report %s changed the steady job: %s, step %s", f, j.Status, j.Steps[0].Status)
			}
		}
	})

	// Nothing else changed: the job runs on, no stranger is connected or
	// holds work, and the run ends as it would have.
	if j := mustJob(t, getRun(t, s.Client, run.ID), "steady"); j.Status != kiln.JobRunning || j.Dispatches != 1 || j.AgentID != "steady" {
		t.Fatalf("the steady job changed: %+v", j)
	}
	waittest.UntilState(t, 30*time.Second, "every stranger's connection to be gone", func() (bool, string) {
		agents, err := s.Client.Agents(bg)
		if err != nil {
			return false, err.Error()
		}
		for _, a := range agents {
			if a.ID != "steady" && a.Connected {
				return false, fmt.Sprintf("%+v", a)
			}
		}
		return true, ""
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run = waitRun(t, s.Client, run.ID, time.Minute)
	if run.Status != kiln.RunSuccess || runCount(t, s.Client) != 1 {
		t.Fatalf("%s (%d runs)", describeRun(run), runCount(t, s.Client))
	}
	if got := texts(logLines(t, s.Client, run.ID, "steady", intp(0))); strings.Join(got, ",") != "started,finished" {
		t.Fatalf("the steady job's log is %q", got)
	}
}

// rawSecret is the secret a raw agent registers id with (B113).
func rawSecret(id string) string {
	sum := sha256.Sum256([]byte("raw agent " + id))
	return hex.EncodeToString(sum[:])
}

// registerFrame is a valid register frame for id.
func registerFrame(id string) []byte {
	return []byte(`{"type":"register","data":{"agent_id":"` + id + `","agent_secret":"` + rawSecret(id) + `","labels":[],"max_jobs":1}}`)
}
