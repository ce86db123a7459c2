package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/kilnci/kiln/internal/cork"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// conn is one agent connection. Its goroutine reads and handles frames in
// order; any goroutine may write to it.
type conn struct {
	f   *Fleet
	ws  *websocket.Conn
	net *cork.Conn // under ws
	id  string

	// token is set once, under the registry's lock (authenticated); other
	// goroutines read it under that lock.
	token store.AgentToken
	// slot is the agent id the connection claimed; guarded by registry.mu.
	slot *idSlot
	// agent is set when registration is recorded.
	agent atomic.Pointer[agent]

	lastSeen atomic.Int64 // unix nanoseconds of the last frame, by Config.Clock
	closing  atomic.Bool
	done     chan struct{} // closed when closing starts
	cause    atomic.Pointer[closeCause]
	// released is guarded by the slot's mutex: the agent's jobs and
	// waiters were handed back (see disconnect).
	released bool

	limit limiter
	// unauth is the connection's slot among those not authenticated yet.
	unauth *unauthSlot
	// lastSeq is the seq of the last durable frame read.
	lastSeq uint64
	// acks is the acknowledgement of stored frames not sent yet.
	acks lazyAck
}

func (c *conn) tokenID() string { return c.token.ID }

// bufPool holds frame read buffers, so an idle connection keeps none.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func putBuf(b *bytes.Buffer) {
	if b.Cap() <= 1<<20 {
		bufPool.Put(b)
	}
}

// serveHTTP upgrades the request and serves the connection until it ends.
func (f *Fleet) serveHTTP(w http.ResponseWriter, r *http.Request) {
	f.acceptMu.Lock()
	if !f.accepting.Load() {
		f.acceptMu.Unlock()
		http.Error(w, "the orchestrator is not ready for agents", http.StatusServiceUnavailable)
		return
	}
	f.handlers.Add(1) // under acceptMu: never after shutdown began waiting
	f.acceptMu.Unlock()
	host, full := f.unauth.acquire(r.RemoteAddr, f.cfg.MaxUnauthenticated, f.cfg.MaxUnauthenticatedPerAddress)
	if full != "" {
		f.handlers.Done()
		f.stats.unauthRefused.Add(1)
		f.log.Warn("agent connection refused: too many connections have not authenticated", "remote", r.RemoteAddr, "limit", full)
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many agent connections are waiting to authenticate; retry later", http.StatusServiceUnavailable)
		return
	}
	slot := &unauthSlot{u: &f.unauth, host: host}
	// The HTTP server's read and write deadlines stay on the connection
	// after the upgrade and would cut a healthy agent off: the handshake
	// has its own timers (auth_timeout, register_timeout) and every write
	// its own deadline (Config.WriteTimeout) (B101).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	cw := &corkWriter{ResponseWriter: w, timeout: f.cfg.WriteTimeout}
	ws, err := websocket.Accept(cw, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		slot.release()
		f.handlers.Done()
		return // Accept answered the request
	}
	nc := cw.conn // not cw: the goroutine must not keep the response alive
	// The connection is served by a goroutine of its own, and the HTTP
	// server's goroutine ends: an idle agent then keeps neither the
	// server's frames on its stack nor the request in the heap.
	go func() {
		defer f.handlers.Done()
		defer slot.release()
		ws.SetReadLimit(MaxUnauthenticatedFrameBytes) // until it authenticates
		c := &conn{f: f, ws: ws, net: nc, id: uuid.NewString(), done: make(chan struct{}), unauth: slot}
		defer c.stopAcks() // no ack timer outlives the connection's reader
		c.lastSeen.Store(f.now().UnixNano())
		f.reg.addConn(c)
		f.stats.connects.Add(1)
		if !f.accepting.Load() { // shutdown began while we upgraded
			f.disconnect(c, causeShutdown())
			return
		}
		f.disconnect(c, c.serve())
	}()
}

// serve runs the handshake and the frame loop and returns why it ended.
func (c *conn) serve() closeCause {
	if cause, ok := c.handshake(); !ok {
		return cause
	}
	for {
		cause, ok := c.next()
		if !ok {
			return cause
		}
	}
}

// read reads one frame into a pooled buffer.
func (c *conn) read() (*bytes.Buffer, error) {
	typ, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return nil, err
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		putBuf(buf)
		return nil, err
	}
	if typ != websocket.MessageText {
		putBuf(buf)
		return nil, &proto.DecodeError{Code: proto.ErrInvalidMessage, Message: "frames are JSON text messages, not binary"}
	}
	c.lastSeen.Store(c.f.now().UnixNano())
	return buf, nil
}

// decode reads and decodes one frame, charging the rate limits. A frame
// that cannot be read or decoded ends the connection with the returned
// cause.
func (c *conn) decode() (uint64, proto.Message, closeCause, bool) {
	buf, err := c.read()
	if err != nil {
		var de *proto.DecodeError
		if errors.As(err, &de) {
			return 0, nil, c.invalid(de.Message), false
		}
		return 0, nil, causeRead(err), false
	}
	n := buf.Len()
	seq, m, err := proto.Decode(buf.Bytes())
	putBuf(buf)
	if err != nil {
		var de *proto.DecodeError
		if errors.As(err, &de) {
			return 0, nil, c.invalid(de.Message), false
		}
		return 0, nil, c.invalid("the frame could not be read"), false
	}
	if !proto.FromAgent(m.Type()) {
		return 0, nil, c.invalid(fmt.Sprintf("%s is a message the orchestrator sends, not an agent", m.Type())), false
	}
	c.f.stats.frame(m.Type())
	if m.Type() != proto.TypeHeartbeat && m.Type() != proto.TypeJobHeartbeat {
		if cause, ok := c.throttle(n); !ok {
			return 0, nil, cause, false
		}
	}
	return seq, m, closeCause{}, true
}

// invalid answers a frame that does not parse or validate.
func (c *conn) invalid(msg string) closeCause {
	c.sendError(proto.ErrInvalidMessage, msg)
	return closeCause{kind: "invalid_message", code: proto.CloseInvalidMessage, reason: "invalid message: " + msg}
}

// throttle charges a frame to the rate limits, waiting while the
// connection is over them, and ends it when it stays over for longer than
// the grace.
func (c *conn) throttle(n int) (closeCause, bool) {
	cfg := &c.f.cfg
	charge := true
	for {
		wait, sustained := c.limit.take(time.Now(), cfg, n, charge)
		if wait <= 0 {
			return closeCause{}, true
		}
		if sustained {
			c.f.stats.rateLimited.Add(1)
			msg := fmt.Sprintf("the agent sent more than %.0f messages or %.0f bytes a second for longer than %s",
				cfg.MessagesPerSecond, cfg.BytesPerSecond, cfg.RateLimitGrace)
			c.sendError(proto.ErrRateLimited, msg)
			return closeCause{kind: "rate_limited", code: proto.CloseRateLimited, reason: "rate limited"}, false
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return causeClosed(), false
		}
		charge = false // charged once; the loop only waits for the deficit
	}
}

// write sends one encoded frame.
func (c *conn) write(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.f.cfg.WriteTimeout)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// send encodes and sends a message; a failure only matters to the reader,
// which sees the connection end.
func (c *conn) send(m proto.Message) error {
	b, err := proto.Encode(0, m)
	if err != nil {
		return err
	}
	return c.write(b)
}

func (c *conn) sendError(code, msg string) {
	if len(msg) > proto.MaxErrorLen {
		msg = msg[:proto.MaxErrorLen]
	}
	_ = c.send(&proto.Error{Code: code, Message: msg})
}

// sendAck acknowledges every durable frame up to seq. It is the most
// frequent frame, so it is encoded by hand.
func (c *conn) sendAck(seq uint64) {
	b := make([]byte, 0, 48)
	b = append(b, `{"type":"ack","data":{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, "}}"...)
	_ = c.write(b)
}

// close sends the close frame and closes the socket, without blocking the
// caller: the close handshake waits for the agent's answer.
func (c *conn) close(cause closeCause) {
	code := websocket.StatusCode(cause.code)
	if code == 0 {
		c.f.closers.Go(func() { _ = c.ws.CloseNow() })
		return
	}
	reason := cause.reason
	if len(reason) > 123 { // the protocol's limit for a close reason
		reason = reason[:123]
	}
	c.f.closers.Go(func() {
		c.flushAck() // what was stored is acknowledged before the close
		_ = c.ws.Close(code, reason)
	})
}
