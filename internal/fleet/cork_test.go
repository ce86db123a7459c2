package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln/internal/cork"
)

// Through a real WebSocket: the connection coder/websocket hijacks is
// corkable, and frames written while it is corked reach the client whole
// and in order once it is uncorked.
func TestCorkedFramesReachTheClientOnUncork(t *testing.T) {
	type side struct {
		ws  *websocket.Conn
		net *cork.Conn
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
	s.net.Cork()
	for _, f := range []string{"one", "two"} {
		if err := s.ws.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	s.net.Uncork()
	for _, want := range []string{"one", "two"} {
		_, b, err := client.Read(ctx)
		if err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %q", b, err, want)
		}
	}
}
