package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/cork"
	"github.com/kilnci/kiln/internal/proto"
)

// agent is a scripted agent: it speaks the real protocol over a real
// WebSocket and runs each dispatched job with its job function. Frames are
// encoded and written under one lock so their sequence numbers go out in
// order.
type agent struct {
	ws  *websocket.Conn
	net *cork.Conn // under ws
	id  string
	job func(a *agent, d *proto.Dispatch, at time.Time)

	// jobs hands dispatches to the agent's job goroutines, which live as
	// long as the connection: a goroutine a dispatch started on a small
	// stack and grew it in the JSON encoder for every job, a tenth of the
	// bench's CPU.
	jobs chan dispatched

	mu      sync.Mutex
	enc     *proto.Encoder // under mu
	seq     uint64
	waiters []ackWaiter
	acked   uint64        // the server's last acknowledgement
	ackSig  chan struct{} // closed and replaced at each acknowledgement

	closed chan struct{}
	err    error // why the read loop ended, once closed is
}

// dispatched is a job the server sent, with when it arrived.
type dispatched struct {
	d  *proto.Dispatch
	at time.Time
}

// ackWaiter is called once the server acknowledged frame seq.
type ackWaiter struct {
	seq  uint64
	done func()
}

// dialAgent connects, authenticates and registers an agent with labels
// (plus the os and arch every agent offers). job runs in its own goroutine
// per dispatch; nil keeps the agent idle.
func dialAgent(ctx context.Context, url, token, id string, labels []string, maxJobs int,
	job func(*agent, *proto.Dispatch, time.Time)) (*agent, error) {
	var nc *cork.Conn
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		nc = cork.New(c, 10*time.Second)
		return nc, nil
	}}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		return nil, fmt.Errorf("agent %s: connect: %w", id, err)
	}
	ws.SetReadLimit(64 << 20)
	a := &agent{ws: ws, net: nc, id: id, job: job, enc: proto.NewEncoder(), ackSig: make(chan struct{}), closed: make(chan struct{})}
	for _, m := range []proto.Message{
		&proto.Auth{Token: token, ProtocolVersion: proto.Version, AgentVersion: "bench"},
		&proto.Register{AgentID: id, AgentSecret: agentSecretFor(id), Labels: labels, MaxJobs: maxJobs, OS: "linux", Arch: "amd64", Hostname: "bench"},
	} {
		if err := a.send(ctx, m); err != nil {
			ws.CloseNow()
			return nil, fmt.Errorf("agent %s: %w", id, err)
		}
		_, f, err := ws.Read(ctx)
		if err != nil {
			ws.CloseNow()
			return nil, fmt.Errorf("agent %s: handshake: %w", id, err)
		}
		if _, reply, err := proto.Decode(f); err != nil {
			ws.CloseNow()
			return nil, fmt.Errorf("agent %s: handshake reply: %w", id, err)
		} else if e, ok := reply.(*proto.Error); ok {
			ws.CloseNow()
			return nil, fmt.Errorf("agent %s: the server refused it: %s: %s", id, e.Code, e.Message)
		}
	}
	if job != nil {
		a.jobs = make(chan dispatched)
		for range maxJobs {
			go a.work()
		}
		go a.read()
	}
	return a, nil
}

// send encodes m, numbering it when it is durable, and writes it.
func (a *agent) send(ctx context.Context, m proto.Message) error {
	_, err := a.sendSeq(ctx, m)
	return err
}

func (a *agent) sendSeq(ctx context.Context, m proto.Message) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var seq uint64
	if proto.Durable(m.Type()) {
		a.seq++
		seq = a.seq
	}
	f, err := a.enc.Encode(seq, m)
	if err != nil {
		return 0, err
	}
	return seq, a.ws.Write(ctx, websocket.MessageText, f)
}

// sendThen sends m and calls done once the server has stored it.
func (a *agent) sendThen(ctx context.Context, m proto.Message, done func()) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	f, err := a.enc.Encode(a.seq, m)
	if err != nil {
		return err
	}
	a.waiters = append(a.waiters, ackWaiter{seq: a.seq, done: done})
	return a.ws.Write(ctx, websocket.MessageText, f)
}

// read handles the server's frames until the connection ends.
func (a *agent) read() {
	defer close(a.closed)
	for {
		_, f, err := a.ws.Read(context.Background())
		if err != nil {
			a.err = err
			return
		}
		at := time.Now()
		m, err := decodeServerFrame(f)
		if err != nil {
			a.err = err
			a.ws.CloseNow()
			return
		}
		switch m := m.(type) {
		case *proto.Dispatch:
			select {
			case a.jobs <- dispatched{m, at}:
			default: // every job goroutine is busy: run it beside them, as before
				go a.job(a, m, at)
			}
		case *proto.Ack:
			a.onAck(m.Seq)
		case *proto.Error:
			a.err = fmt.Errorf("the server sent %s: %s", m.Code, m.Message)
		}
	}
}

// work runs the jobs read hands over until the connection ends.
func (a *agent) work() {
	for {
		select {
		case j := <-a.jobs:
			a.job(a, j.d, j.at)
		case <-a.closed:
			return
		}
	}
}

// serverFrame is what a scripted agent reads of the server's frames: the
// fields of the three types it acts on. A dispatch's spec is skipped, not
// decoded: a real agent decodes it on its own machine, and on the bench's
// the load generator's CPU is taken from the server it measures (the same
// reason its log viewers count lines without decoding them).
type serverFrame struct {
	Type string `json:"type"`
	Data struct {
		JobID      string `json:"job_id"`
		RunID      string `json:"run_id"`
		LeaseEpoch int64  `json:"lease_epoch"`
		Attempt    int    `json:"attempt"`
		Seq        uint64 `json:"seq"`
		Code       string `json:"code"`
		Message    string `json:"message"`
	} `json:"data"`
}

// decodeServerFrame reads a dispatch, an ack or an error; other frames
// come back as nil.
func decodeServerFrame(f []byte) (proto.Message, error) {
	var sf serverFrame
	if err := gojson.Unmarshal(f, &sf); err != nil {
		return nil, fmt.Errorf("a frame from the server does not decode: %w", err)
	}
	d := &sf.Data
	switch sf.Type {
	case proto.TypeDispatch:
		if d.JobID == "" || d.LeaseEpoch < 1 {
			return nil, fmt.Errorf("a dispatch from the server has no job id or lease epoch: %.200s", f)
		}
		return &proto.Dispatch{JobID: d.JobID, RunID: d.RunID, LeaseEpoch: d.LeaseEpoch, Attempt: d.Attempt}, nil
	case proto.TypeAck:
		return &proto.Ack{Seq: d.Seq}, nil
	case proto.TypeError:
		return &proto.Error{Code: d.Code, Message: d.Message}, nil
	}
	return nil, nil
}

func (a *agent) onAck(seq uint64) {
	a.mu.Lock()
	a.acked = seq
	close(a.ackSig)
	a.ackSig = make(chan struct{})
	n := 0
	for n < len(a.waiters) && a.waiters[n].seq <= seq {
		n++
	}
	done := a.waiters[:n:n]
	a.waiters = a.waiters[n:]
	a.mu.Unlock()
	for _, w := range done {
		w.done()
	}
}

// waitAcked waits until the server stored every frame up to seq.
func (a *agent) waitAcked(ctx context.Context, seq uint64) error {
	for {
		a.mu.Lock()
		done, sig := a.acked >= seq, a.ackSig
		a.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.closed:
			return fmt.Errorf("agent %s disconnected: %v", a.id, a.err)
		case <-sig:
		}
	}
}

func (a *agent) close() { a.ws.CloseNow() }

// start acknowledges a job and reports it running in one write, as
// kiln's agent does (package cork).
func (a *agent) start(ctx context.Context, d *proto.Dispatch) error {
	a.net.Cork()
	defer a.net.Uncork()
	if err := a.send(ctx, &proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch}); err != nil {
		return err
	}
	return a.send(ctx, &proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
}

// runNoop runs a job as nothing at all: ack, running, success. freeing,
// when set, is called just before the success goes out (the agent is free
// from then on); finished is called once the server stored the success.
func runNoop(a *agent, d *proto.Dispatch, freeing, finished func()) {
	runFor(a, d, 0, freeing, finished)
}

// runFor is runNoop for a job that runs for hold between its start and
// its success: the agent is busy, and asks for nothing, that long.
func runFor(a *agent, d *proto.Dispatch, hold time.Duration, freeing, finished func()) {
	ctx := context.Background()
	if a.start(ctx, d) != nil {
		return
	}
	if hold > 0 {
		time.Sleep(hold) // the job's work: the bench waits for nothing here
	}
	if freeing != nil {
		freeing()
	}
	_ = a.sendThen(ctx, &proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobSuccess, Time: time.Now()}, finished)
}

// dialAgents connects n agents named prefix-00000… with a bounded number
// of handshakes in flight, and reports progress every second.
func (b *bench) dialAgents(ctx context.Context, s *serverProc, token, prefix string, n int, labels []string,
	job func(*agent, *proto.Dispatch, time.Time)) ([]*agent, error) {
	agents := make([]*agent, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var done atomic.Int64
	stopProgress := make(chan struct{})
	defer close(stopProgress)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
				b.progress("   %d/%d agents connected", done.Load(), n)
			}
		}
	}()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a, err := dialAgent(ctx, s.wsURL(), token, fmt.Sprintf("%s-%05d", prefix, i), labels, 1, job)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			agents[i] = a
			done.Add(1)
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		closeAgents(agents)
		return nil, fmt.Errorf("%d of %d agents failed to connect; the first: %w", len(errs), n, errs[0])
	}
	return agents, nil
}

func closeAgents(agents []*agent) {
	for _, a := range agents {
		if a != nil {
			a.close()
		}
	}
}

// agentSecretFor is the secret a scripted agent registers its id with (B113):
// the same for every connection of the id.
func agentSecretFor(id string) string {
	sum := sha256.Sum256([]byte("kiln bench " + id))
	return hex.EncodeToString(sum[:])
}
