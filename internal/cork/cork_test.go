package cork_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln/internal/cork"
)

// writeLog is a net.Conn that records each Write it is given.
type writeLog struct {
	net.Conn
	mu        sync.Mutex
	writes    []string
	fail      error
	closed    bool
	deadlines []time.Time // each SetWriteDeadline
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return 0, w.fail
	}
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func (w *writeLog) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadlines = append(w.deadlines, t)
	return nil
}
func (w *writeLog) Close() error { w.closed = true; return nil }

func (w *writeLog) got() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}

// Corked writes leave together, in order, in one write when uncorked;
// uncorked ones pass straight through; uncorking twice, or without a cork,
// writes nothing.
func TestCorkSendsHeldWritesInOneWrite(t *testing.T) {
	under := &writeLog{}
	c := cork.New(under, time.Second)
	mustWrite := func(s string) {
		t.Helper()
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d, %v", s, n, err)
		}
	}
	mustWrite("a")
	c.Cork()
	mustWrite("dispatch,")
	c.Cork() // a second cork changes nothing
	done := make(chan struct{})
	go func() { // another goroutine's frame, while corked
		defer close(done)
		mustWrite("heartbeat,")
	}()
	<-done
	mustWrite("ack")
	if got := under.got(); len(got) != 1 {
		t.Fatalf("corked writes went out: %q", got)
	}
	c.Uncork()
	c.Uncork()
	mustWrite("b")
	want := []string{"a", "dispatch,heartbeat,ack", "b"}
	if got := under.got(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("writes %q, want %q", got, want)
	}
}

// A held write that fails closes the connection, as coder/websocket's own
// write timeout does, so the connection's reader sees it end.
func TestCorkClosesTheConnectionWhenItsWriteFails(t *testing.T) {
	under := &writeLog{fail: errors.New("broken pipe")}
	c := cork.New(under, time.Second)
	c.Cork()
	if _, err := c.Write([]byte("dispatch")); err != nil {
		t.Fatal(err)
	}
	c.Uncork()
	if !under.closed {
		t.Fatal("a failed uncork left the connection open")
	}
}

// Held counts what waits for Uncork, and nothing once it is sent.
func TestHeldCountsTheBytesWaiting(t *testing.T) {
	under := &writeLog{}
	c := cork.New(under, time.Second)
	if _, err := c.Write([]byte("passes")); err != nil || c.Held() != 0 {
		t.Fatalf("an uncorked write was held: %d, %v", c.Held(), err)
	}
	c.Cork()
	_, _ = c.Write([]byte("ack,"))
	_, _ = c.Write([]byte("running"))
	if got := c.Held(); got != len("ack,running") {
		t.Fatalf("held %d bytes, want %d", got, len("ack,running"))
	}
	c.Uncork()
	if c.Held() != 0 || c.Corked() {
		t.Fatalf("after uncork: held %d, corked %v", c.Held(), c.Corked())
	}
}

// An agent's side: a client dialing through a corked connection sends
// frames that reach the server whole and in order once it uncorks.
func TestCorkedClientFramesReachTheServer(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer ws.CloseNow()
		for range 2 {
			_, b, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			got <- string(b)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var nc *cork.Conn
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		nc = cork.New(c, time.Second)
		return nc, nil
	}}
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseNow()
	nc.Cork()
	for _, f := range []string{"ack", "running"} {
		if err := client.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case f := <-got:
		t.Fatalf("the server read %q while the client was corked", f)
	default:
	}
	if nc.Held() == 0 {
		t.Fatal("nothing was held")
	}
	nc.Uncork()
	for _, want := range []string{"ack", "running"} {
		select {
		case f := <-got:
			if f != want {
				t.Fatalf("read %q, want %q", f, want)
			}
		case <-ctx.Done():
			t.Fatal("the held frames never arrived")
		}
	}
}

// A timeout bounds the write that uncorks and is lifted after it; without
// one, no deadline is set at all (the agent's side: a slow link may take
// long over a batch of log frames).
func TestUncorkDeadlineOnlyWithATimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		want    int
	}{{time.Second, 2}, {0, 0}} {
		under := &writeLog{}
		c := cork.New(under, tc.timeout)
		c.Cork()
		_, _ = c.Write([]byte("frames"))
		c.Uncork()
		if len(under.deadlines) != tc.want || (tc.want == 2 && (under.deadlines[0].IsZero() || !under.deadlines[1].IsZero())) {
			t.Fatalf("timeout %s: deadlines %v", tc.timeout, under.deadlines)
		}
	}
}
