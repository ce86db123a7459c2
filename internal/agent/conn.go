package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	gojson "github.com/goccy/go-json"
	"golang.org/x/sync/errgroup"

	"github.com/kilnci/kiln/internal/cork"
	"github.com/kilnci/kiln/internal/proto"
)

// session is one registered connection to the orchestrator.
type session struct {
	a    *agent
	conn *websocket.Conn
	net  *cork.Conn      // under conn: the write loop corks it
	ctx  context.Context // ends with the session
	// target is the URL this session dialed.
	target string

	heartbeat, jobHeartbeat time.Duration
	// pings carries the send times of heartbeats to the pinger, which
	// extends the lease when the orchestrator answers the ping after one.
	pings       chan time.Time
	pingTimeout time.Duration

	mu       sync.Mutex
	readErr  error        // why reading ended: the close code lives here
	lastErr  *proto.Error // the last error frame, which explains a close
	finished bool
}

// noRedirects is the HTTP client the agent dials with. The token goes in
// the first frame after the upgrade, to whoever answered it: a redirect
// (from a misconfigured proxy, or anyone who can answer for the
// orchestrator's address) would send it to another host, so the agent
// refuses to follow one and says so.
var noRedirects = &http.Client{CheckRedirect: refuseRedirect}

func refuseRedirect(req *http.Request, via []*http.Request) error {
	return fmt.Errorf("the orchestrator redirected to %s; the agent does not follow redirects: give --server the final URL", req.URL.Redacted())
}

// corkingClient is noRedirects for one connection, whose network
// connection (under TLS, if any) it hands to got, corkable. hook, when
// set, wraps the connection first. The held bytes' write has no deadline
// of its own, as the outbox's frames never had one: a slow link may take
// long over a batch of log frames, and a dead one ends the session (its
// pings go unanswered), which closes the connection under the write.
func corkingClient(hook func(net.Conn) net.Conn, got func(*cork.Conn)) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if hook != nil {
			c = hook(c)
		}
		nc := cork.New(c, 0)
		got(nc)
		return nc, nil
	}
	return &http.Client{Transport: tr, CheckRedirect: refuseRedirect}
}

// session dials, authenticates and registers, then serves the connection
// until it ends. registered says whether registration succeeded (the backoff
// resets then).
func (a *agent) session(life context.Context) (registered bool, err error) {
	hctx, cancel := context.WithTimeout(life, a.cfg.HandshakeTimeout)
	defer cancel()
	// A hard stop abandons a connection not yet registered: it has
	// nothing to flush.
	defer context.AfterFunc(a.stopCtx, cancel)()
	began := a.now() // the orchestrator cannot have heard from this connection before
	target := a.target()
	var nc *cork.Conn
	client := corkingClient(a.cfg.netHook, func(c *cork.Conn) { nc = c })
	defer client.CloseIdleConnections()
	conn, _, err := websocket.Dial(hctx, target, &websocket.DialOptions{
		HTTPHeader: http.Header{"User-Agent": {"kiln-agent/" + a.cfg.Version}},
		HTTPClient: client,
	})
	if err != nil {
		return false, fmt.Errorf("connect to %s: %w", target, err)
	}
	defer conn.CloseNow()
	if nc == nil { // a dial that did not go through the transport's dialer
		return false, fmt.Errorf("connect to %s: the connection was not dialed by the agent", target)
	}
	// A larger frame closes the connection with 1009.
	conn.SetReadLimit(proto.MaxFrameBytes)

	ctx, stop := context.WithCancel(life)
	defer stop()
	s := &session{a: a, conn: conn, net: nc, ctx: ctx, target: target, pings: make(chan time.Time, 1)}
	reg, ack, err := s.handshake(hctx)
	if err != nil {
		return false, s.outcome(err)
	}
	cancel()
	if a.lostSince(reg) {
		// The orchestrator now holds for this agent a job the lease
		// stopped meanwhile: register again without it (B126).
		conn.Close(websocket.StatusNormalClosure, "the agent's lease ran out during registration")
		return false, errors.New("the agent's lease ran out while it registered; registering again without the stopped jobs")
	}
	a.learn(target, ack.Coordinators)
	s.registered(ack, began)
	defer s.disconnected()
	if !reg.Draining {
		a.mu.Lock()
		st := &proto.AgentStatus{ActiveJobs: a.runningLocked(), Draining: a.draining}
		a.mu.Unlock()
		if st.Draining { // the drain began during the handshake
			s.sendLogged(st)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.readLoop(gctx) })
	g.Go(func() error { return s.writeLoop(gctx) })
	g.Go(func() error { return s.heartbeats(gctx) })
	g.Go(func() error { return s.pinger(gctx) })
	g.Go(func() error { return s.finisher(gctx) })
	return true, s.outcome(g.Wait())
}

// handshake sends auth and register and waits for their answers.
func (s *session) handshake(ctx context.Context) (*proto.Register, *proto.RegisterAck, error) {
	auth := &proto.Auth{Token: s.a.cfg.Token, ProtocolVersion: proto.Version, AgentVersion: plain(s.a.cfg.Version, proto.MaxMetadataLen)}
	if err := s.write(ctx, auth); err != nil {
		return nil, nil, err
	}
	if _, err := s.expect(ctx, proto.TypeAuthOK); err != nil {
		return nil, nil, err
	}
	reg := s.a.registration()
	if err := s.write(ctx, reg); err != nil {
		return nil, nil, err
	}
	m, err := s.expect(ctx, proto.TypeRegisterAck)
	if err != nil {
		return nil, nil, err
	}
	return reg, m.(*proto.RegisterAck), nil
}

// expect reads frames until one of type typ arrives.
func (s *session) expect(ctx context.Context, typ string) (proto.Message, error) {
	for {
		m, err := s.read(ctx)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		if m.Type() == typ {
			return m, nil
		}
		if e, ok := m.(*proto.Error); ok {
			s.noteError(e)
			continue
		}
		s.a.log.Warn("unexpected frame during the handshake; ignored", "type", m.Type(), "want", typ)
	}
}

// read reads one frame. A frame the agent cannot decode yields (nil, nil)
// after it was dealt with: refusing a dispatch it can still identify, and
// ignoring anything else, so that a newer orchestrator's additions never
// cut the agent off.
func (s *session) read(ctx context.Context) (proto.Message, error) {
	_, b, err := s.conn.Read(ctx)
	if err != nil {
		s.mu.Lock()
		s.readErr = err
		s.mu.Unlock()
		return nil, err
	}
	_, m, err := proto.Decode(b)
	if err != nil {
		s.undecodable(b, err)
		return nil, nil
	}
	return m, nil
}

func (s *session) undecodable(b []byte, err error) {
	var f struct {
		Type string `json:"type"`
		Data struct {
			JobID      string `json:"job_id"`
			LeaseEpoch int64  `json:"lease_epoch"`
		} `json:"data"`
	}
	_ = gojson.Unmarshal(b, &f)
	if f.Type == proto.TypeDispatch {
		rej := &proto.JobReject{JobID: f.Data.JobID, LeaseEpoch: f.Data.LeaseEpoch, Reason: proto.RejectInvalid,
			Message: clip("the agent cannot read this dispatch: "+err.Error(), proto.MaxErrorLen)}
		if rej.Validate() == nil {
			s.sendLogged(rej)
		}
	}
	s.a.log.Warn("ignored a frame the agent cannot read", "type", clip(f.Type, 64), "err", err)
}

// registered makes s the agent's connection: the jobs the orchestrator
// dropped are stopped and their frames discarded before anything is replayed.
func (s *session) registered(ack *proto.RegisterAck, began time.Time) {
	s.heartbeat = msOr(ack.HeartbeatIntervalMS, s.a.cfg.HeartbeatInterval)
	s.jobHeartbeat = msOr(ack.JobHeartbeatIntervalMS, s.a.cfg.JobHeartbeatInterval)
	_, afterLoss := leaseTimings(ack)
	s.pingTimeout = pingTimeout(afterLoss, s.heartbeat)
	a := s.a
	a.startLease(ack, began)
	var drop []Execution
	a.mu.Lock()
	a.sess = s
	for _, id := range ack.Dropped {
		if x := a.dropLocked(id); x != nil {
			drop = append(drop, x)
		}
	}
	a.changedLocked()
	a.mu.Unlock()
	for _, x := range drop {
		x.Cancel(true)
	}
	a.out.online(a.now())
	// Job ids joined, so that none reads "recovered=[]" and no job
	// "recovered=<nil>" depending on how the ack was decoded.
	a.log.Info("registered", "agent_id", ack.AgentID, "labels", ack.Labels, "recovered", strings.Join(ack.Recovered, ","),
		"dropped", strings.Join(ack.Dropped, ","), "replaying", a.out.size())
}

func (s *session) disconnected() {
	a := s.a
	a.mu.Lock()
	if a.sess == s {
		a.sess = nil
	}
	a.changedLocked()
	a.mu.Unlock()
	s.mu.Lock()
	readErr := s.readErr
	s.mu.Unlock()
	a.connectionLost(readErr)
	a.out.offline(a.now())
}

func msOr(ms int64, d time.Duration) time.Duration {
	if ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return d
}

// readLoop handles the orchestrator's frames.
func (s *session) readLoop(ctx context.Context) error {
	for {
		m, err := s.read(ctx)
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case nil:
		case *proto.Ack:
			s.a.acked(m.Seq)
		case *proto.Dispatch:
			s.a.dispatch(s, m)
		case *proto.Cancel:
			s.a.cancel(m)
		case *proto.Drain:
			s.a.drain("the orchestrator asked the agent to drain")
		case *proto.Coordinators:
			// B139: the live coordinators changed since register.ack.
			s.a.learn(s.target, m.Coordinators)
			s.a.log.Info("the orchestrator's coordinators changed", "coordinators", s.a.knownServers())
		case *proto.Error:
			s.noteError(m)
		default:
			s.a.log.Warn("ignored an unexpected frame", "type", m.Type())
		}
	}
}

// writeLoop writes the outbox's frames in seq order: first the replay of
// everything unacknowledged, then new frames as jobs report them.
func (s *session) writeLoop(ctx context.Context) error {
	enc := proto.NewEncoder()
	for {
		wrote, err := s.writeReady(ctx, enc)
		if err != nil {
			return err
		}
		if wrote {
			continue
		}
		select {
		case <-s.a.out.ready():
		case <-ctx.Done():
			return nil
		}
	}
}

// maxCorked bounds what one pass of the write loop holds before it sends.
const maxCorked = 256 << 10

// writeReady writes every frame ready now with the connection corked, so
// they leave in one write(2) and the orchestrator reads them at once: a
// job's acknowledgement with its running status (addStatusAfter), a step's
// last lines with its status, a job's end with its step's.
func (s *session) writeReady(ctx context.Context, enc *proto.Encoder) (wrote bool, err error) {
	defer func() {
		if wrote {
			s.net.Uncork()
		}
	}()
	write := func(b []byte) error {
		if !wrote {
			s.net.Cork()
			wrote = true
		}
		if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	}
	for s.net.Held() < maxCorked {
		seq, before, m, ok := s.a.out.nextAfter()
		if !ok {
			return wrote, nil
		}
		if before != nil {
			if b, err := proto.Encode(0, before); err != nil {
				s.a.log.Error("a control frame could not be encoded; dropped", "type", before.Type(), "err", err)
			} else if err := write(b); err != nil {
				return wrote, err
			}
		}
		b, err := enc.Encode(seq, m)
		if err != nil {
			// Cannot happen with cleaned frames; skipping one is better
			// than replaying it forever.
			s.a.log.Error("a durable frame could not be encoded; dropped", "seq", seq, "err", err)
			continue
		}
		if err := write(b); err != nil {
			return wrote, err
		}
	}
	return wrote, nil
}

// heartbeats sends the agent's heartbeat and one per running job.
func (s *session) heartbeats(ctx context.Context) error {
	hb := time.NewTicker(s.heartbeat)
	defer hb.Stop()
	jhb := time.NewTicker(s.jobHeartbeat)
	defer jhb.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hb.C:
			a := s.a
			sent := a.now()
			a.mu.Lock()
			m := &proto.Heartbeat{Time: sent, ActiveJobs: a.runningLocked(), Draining: a.draining}
			a.mu.Unlock()
			if s.write(ctx, m) == nil {
				select {
				case s.pings <- sent:
				default: // a ping is still waiting for its answer
				}
			}
		case <-jhb.C:
			for _, m := range s.a.jobHeartbeats() {
				s.sendLogged(m)
			}
		}
	}
}

// pinger pings the orchestrator after each heartbeat. Its answer means
// the heartbeat was read (frames are read in order), so the orchestrator
// heard from the agent at or after the heartbeat's send time, which extends
// the lease (B126). No answer within the ping timeout ends the connection:
// it is dead, or too slow to count on.
func (s *session) pinger(ctx context.Context) error {
	for {
		var sent time.Time
		select {
		case <-ctx.Done():
			return nil
		case sent = <-s.pings:
		}
		pctx, cancel := context.WithTimeout(ctx, s.pingTimeout)
		err := s.conn.Ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("the orchestrator did not answer a ping within %s: %w", s.pingTimeout, err)
		}
		s.a.heardAt(s, sent)
	}
}

func (a *agent) jobHeartbeats() []*proto.JobHeartbeat {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*proto.JobHeartbeat
	for _, j := range a.jobs {
		if !j.done && !j.dropped && !j.lost && j.exec != nil {
			out = append(out, &proto.JobHeartbeat{JobID: j.id, LeaseEpoch: j.epoch})
		}
	}
	return out
}

// finisher closes the connection once a drain or stop is complete.
func (s *session) finisher(ctx context.Context) error {
	for {
		ch := s.a.changed()
		if s.a.finished() {
			s.mu.Lock()
			s.finished = true
			s.mu.Unlock()
			s.conn.Close(websocket.StatusNormalClosure, "agent stopped")
			return errFinished
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
}

// write sends a control frame (no seq) with the session's write timeout.
func (s *session) write(ctx context.Context, m proto.Message) error {
	b, err := proto.Encode(0, m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.a.cfg.WriteTimeout)
	defer cancel()
	return s.conn.Write(ctx, websocket.MessageText, b)
}

// sendLogged writes a control frame; a failure only matters to the reader,
// which sees the connection end.
func (s *session) sendLogged(m proto.Message) {
	if err := s.write(s.ctx, m); err != nil {
		s.a.log.Debug("a control frame was not sent", "type", m.Type(), "err", err)
	}
}

func (s *session) noteError(e *proto.Error) {
	s.mu.Lock()
	s.lastErr = e
	s.mu.Unlock()
	s.a.log.Warn("the orchestrator reported an error", "code", e.Code, "message", e.Message)
}

// outcome classifies how a session ended: the close code the orchestrator
// sent decides whether the agent retries.
func (s *session) outcome(err error) error {
	s.mu.Lock()
	readErr, lastErr, finished := s.readErr, s.lastErr, s.finished
	s.mu.Unlock()
	if finished {
		return errFinished
	}
	if websocket.CloseStatus(readErr) != -1 || err == nil {
		err = readErr
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		return err
	}
	detail := ce.Reason
	if lastErr != nil {
		detail = lastErr.Message
	}
	if detail != "" {
		detail = ": " + detail
	}
	switch ce.Code {
	case proto.CloseSuperseded:
		return errSuperseded
	case proto.CloseProtocol:
		return &fatalError{fmt.Errorf("the orchestrator does not speak protocol version %d (close %d%s); upgrade the agent or the orchestrator", proto.Version, ce.Code, detail)}
	case proto.CloseAuthFailed:
		if lastErr != nil && lastErr.Code == proto.ErrAgentIDBound {
			return &fatalError{fmt.Errorf("the orchestrator refused the agent id (close %d%s)", ce.Code, detail)}
		}
		return &fatalError{fmt.Errorf("the orchestrator refused the agent token: it is unknown, revoked, expired, already used or does not allow these labels (close %d%s)", ce.Code, detail)}
	case proto.CloseTokenRevoked:
		return &fatalError{fmt.Errorf("the agent token was revoked (close %d%s)", ce.Code, detail)}
	}
	err = fmt.Errorf("the orchestrator closed the connection (close %d%s)", ce.Code, detail)
	if ce.Code == proto.CloseGoingAway {
		return &leavingError{err}
	}
	return err
}

// leavingError is the orchestrator's going away (close 1001: it stops or
// restarts): the agent reconnects as after any lost connection, but the
// operator who stopped the server need not be warned about it.
type leavingError struct{ err error }

func (e *leavingError) Error() string { return e.err.Error() }
func (e *leavingError) Unwrap() error { return e.err }
