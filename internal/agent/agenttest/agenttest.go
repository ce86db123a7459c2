// Package agenttest is a scripted orchestrator for testing agents: an
// httptest server that speaks the real protocol on /ws, hands each
// connection to the test, and lets the test read the agent's frames and send
// the orchestrator's, one by one. It validates every frame the agent sends
// with proto.Decode, so an agent that breaks the protocol fails the test.
package agenttest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln/internal/proto"
)

// Timeout bounds every wait in this package.
var Timeout = 10 * time.Second

// Orchestrator is the test server.
type Orchestrator struct {
	t       testing.TB
	srv     *httptest.Server
	conns   chan *Conn
	offline atomic.Bool
	dials   atomic.Int64
	autoAck atomic.Bool
}

// New starts an orchestrator; it is closed when the test ends.
func New(t testing.TB) *Orchestrator {
	o := &Orchestrator{t: t, conns: make(chan *Conn, 64)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+proto.Path, o.serve)
	o.srv = httptest.NewServer(mux)
	t.Cleanup(o.srv.Close)
	return o
}

// URL is the server's http:// URL (the agent appends /ws).
func (o *Orchestrator) URL() string { return o.srv.URL }

// SetOffline makes new connection attempts fail with 503 (true) or succeed.
func (o *Orchestrator) SetOffline(off bool) { o.offline.Store(off) }

// SetAutoAck makes connections accepted from now on acknowledge every
// durable frame as soon as it arrives.
func (o *Orchestrator) SetAutoAck(on bool) { o.autoAck.Store(on) }

// Dials counts connection attempts, refused ones included.
func (o *Orchestrator) Dials() int64 { return o.dials.Load() }

func (o *Orchestrator) serve(w http.ResponseWriter, r *http.Request) {
	o.dials.Add(1)
	if o.offline.Load() {
		http.Error(w, "offline", http.StatusServiceUnavailable)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(proto.MaxFrameBytes + 1024)
	c := &Conn{ws: ws, done: make(chan struct{}), notify: make(chan struct{}, 1), hb: make(chan proto.Message, 1024)}
	c.autoAck.Store(o.autoAck.Load())
	o.conns <- c
	c.readLoop()
}

// Accept waits for the agent's next connection.
func (o *Orchestrator) Accept(t testing.TB) *Conn {
	t.Helper()
	select {
	case c := <-o.conns:
		t.Cleanup(func() {
			c.ws.CloseNow()
			<-c.done
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, s := range c.invalid {
				t.Errorf("agenttest: the agent sent an invalid frame: %s", s)
			}
		})
		return c
	case <-time.After(Timeout):
		t.Fatalf("agenttest: no connection within %s", Timeout)
		return nil
	}
}

// NoConnection fails the test if the agent connects within d.
func (o *Orchestrator) NoConnection(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-o.conns:
		t.Fatal("agenttest: the agent connected again")
	case <-time.After(d):
	}
}

// Frame is one frame the agent sent.
type Frame struct {
	Seq uint64
	Msg proto.Message
}

// Type is the frame's message type.
func (f Frame) Type() string { return f.Msg.Type() }

// Conn is one agent connection.
type Conn struct {
	ws      *websocket.Conn
	autoAck atomic.Bool

	mu       sync.Mutex
	frames   []Frame // not yet taken by Next
	all      []Frame // every durable and control frame, in arrival order
	readErr  error
	done     chan struct{}
	notify   chan struct{}
	hb       chan proto.Message // heartbeat and job.heartbeat frames
	lastSeq  uint64
	outOfSeq bool
	invalid  []string // frames that failed proto.Decode
}

func (c *Conn) readLoop() {
	defer close(c.done)
	for {
		_, b, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.readErr = err
			c.mu.Unlock()
			return
		}
		seq, m, err := proto.Decode(b)
		if err != nil {
			c.mu.Lock()
			c.invalid = append(c.invalid, fmt.Sprintf("%v\n%.300s", err, b))
			c.mu.Unlock()
			continue
		}
		switch m.Type() {
		case proto.TypeHeartbeat, proto.TypeJobHeartbeat:
			select {
			case c.hb <- m:
			default:
			}
			continue
		}
		// The ack goes out before the test can see the frame, so anything
		// the test sends after seeing it reaches the agent after the ack.
		if seq > 0 && c.autoAck.Load() {
			c.send(&proto.Ack{Seq: seq})
		}
		c.mu.Lock()
		if seq > 0 {
			if seq <= c.lastSeq {
				c.outOfSeq = true
			}
			c.lastSeq = seq
		}
		c.frames = append(c.frames, Frame{seq, m})
		c.all = append(c.all, Frame{seq, m})
		c.mu.Unlock()
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// SetAutoAck switches acknowledging every durable frame on arrival.
func (c *Conn) SetAutoAck(on bool) { c.autoAck.Store(on) }

// Next returns the agent's next frame other than heartbeats.
func (c *Conn) Next(t testing.TB) Frame {
	t.Helper()
	deadline := time.After(Timeout)
	for {
		c.mu.Lock()
		if len(c.frames) > 0 {
			f := c.frames[0]
			c.frames = c.frames[1:]
			c.mu.Unlock()
			return f
		}
		err := c.readErr
		c.mu.Unlock()
		if err != nil {
			t.Fatalf("agenttest: connection ended while waiting for a frame: %v", err)
		}
		select {
		case <-c.notify:
		case <-c.done:
		case <-deadline:
			t.Fatalf("agenttest: no frame within %s", Timeout)
		}
	}
}

// Expect returns the next frame and fails the test unless it has type typ.
func (c *Conn) Expect(t testing.TB, typ string) Frame {
	t.Helper()
	f := c.Next(t)
	if f.Type() != typ {
		t.Fatalf("agenttest: got %s frame %+v, want %s", f.Type(), f.Msg, typ)
	}
	return f
}

// Until returns frames until (and including) the first for which stop is true.
func (c *Conn) Until(t testing.TB, stop func(Frame) bool) []Frame {
	t.Helper()
	var out []Frame
	for {
		f := c.Next(t)
		out = append(out, f)
		if stop(f) {
			return out
		}
	}
}

// Heartbeat returns the next heartbeat or job.heartbeat frame.
func (c *Conn) Heartbeat(t testing.TB) proto.Message {
	t.Helper()
	select {
	case m := <-c.hb:
		return m
	case <-time.After(Timeout):
		t.Fatalf("agenttest: no heartbeat within %s", Timeout)
		return nil
	}
}

// Pending returns the frames received but not yet taken by Next.
func (c *Conn) Pending() []Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Frame(nil), c.frames...)
}

// OutOfOrder reports whether durable frames arrived with a seq not above the
// previous one on this connection.
func (c *Conn) OutOfOrder() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outOfSeq
}

// Send sends an orchestrator frame; its seq is never set (only agent frames
// are durable).
func (c *Conn) Send(t testing.TB, m proto.Message) {
	t.Helper()
	if err := c.send(m); err != nil {
		t.Logf("agenttest: send %s: %v", m.Type(), err)
	}
}

func (c *Conn) send(m proto.Message) error {
	b, err := proto.Encode(0, m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// Handshake reads auth and register, answers auth.ok and register.ack (the
// agent id is filled in from the registration), and returns both frames.
func (c *Conn) Handshake(t testing.TB, ack proto.RegisterAck) (*proto.Auth, *proto.Register) {
	t.Helper()
	auth := c.Expect(t, proto.TypeAuth).Msg.(*proto.Auth)
	c.Send(t, &proto.AuthOK{ConnectionID: "c1"})
	reg := c.Expect(t, proto.TypeRegister).Msg.(*proto.Register)
	if ack.AgentID == "" {
		ack.AgentID = reg.AgentID
	}
	if ack.Labels == nil {
		ack.Labels = reg.Labels
	}
	if ack.MaxJobs == 0 {
		ack.MaxJobs = reg.MaxJobs
	}
	c.Send(t, &ack)
	return auth, reg
}

// Close closes the connection with a code, after an error frame when e is
// not nil.
func (c *Conn) Close(e *proto.Error, code int, reason string) {
	if e != nil {
		c.send(e)
	}
	c.ws.Close(websocket.StatusCode(code), reason)
}

// Drop ends the connection without a close frame, as a network failure would.
func (c *Conn) Drop() { c.ws.CloseNow() }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// WaitClosed waits for the connection to end and returns the close code the
// agent sent (-1 if none).
func (c *Conn) WaitClosed(t testing.TB) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(Timeout):
		t.Fatalf("agenttest: the connection did not end within %s", Timeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(websocket.CloseStatus(c.readErr))
}
