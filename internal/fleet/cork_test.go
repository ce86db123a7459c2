package fleet

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
)

// writeLog is a net.Conn that records each Write it is given.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes []string
	fail   error
	closed bool
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

func (w *writeLog) SetWriteDeadline(time.Time) error { return nil }
func (w *writeLog) Close() error                     { w.closed = true; return nil }

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
	c := &corkConn{Conn: under, timeout: time.Second}
	mustWrite := func(s string) {
		t.Helper()
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d, %v", s, n, err)
		}
	}
	mustWrite("a")
	c.cork()
	mustWrite("dispatch,")
	c.cork() // a second cork changes nothing
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
	c.uncork()
	c.uncork()
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
	c := &corkConn{Conn: under, timeout: time.Second}
	c.cork()
	if _, err := c.Write([]byte("dispatch")); err != nil {
		t.Fatal(err)
	}
	c.uncork()
	if !under.closed {
		t.Fatal("a failed uncork left the connection open")
	}
}

// Through a real WebSocket: the connection coder/websocket hijacks is
// corkable, and frames written while it is corked reach the client whole
// and in order once it is uncorked.
func TestCorkedFramesReachTheClientOnUncork(t *testing.T) {
	type side struct {
		ws  *websocket.Conn
		net *corkConn
	}
	accepted := make(chan side, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &corkWriter{ResponseWriter: w, timeout: time.Second}
		ws, err := websocket.Accept(cw, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- side{ws, cw.conn}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseNow()
	s := <-accepted
	defer s.ws.CloseNow()
	if s.net == nil {
		t.Fatal("the hijacked connection is not corkable")
	}
	s.net.cork()
	for _, f := range []string{"one", "two"} {
		if err := s.ws.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	s.net.uncork()
	for _, want := range []string{"one", "two"} {
		_, b, err := client.Read(ctx)
		if err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %q", b, err, want)
		}
	}
}
