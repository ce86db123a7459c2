package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/server"
)

// hookSecret signs the deliveries of the generic source these tests post to.
const hookSecret = "limits-secret"

// addHookSource adds a generic HMAC source named "hook": a webhook to it
// is read and verified in full, which is what the attacks below need.
func addHookSource(t testing.TB, s *kilnServer) string {
	t.Helper()
	src := forge.Source{Name: "hook", Kind: kiln.SourceGeneric, Generic: &forge.GenericConfig{
		Repository: "acme/app", CloneURL: "https://git.example.test/acme/app.git",
		Auth: forge.GenericAuth{Type: forge.AuthHMAC, Secret: hookSecret}}}
	if _, err := s.Client.AddSource(bg, src); err != nil {
		t.Fatalf("add the generic source: %v", err)
	}
	return "/webhook/generic/hook"
}

// shortHTTPTimeouts sets every HTTP timeout to one second.
func shortHTTPTimeouts(c *server.Config) {
	c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout = time.Second, time.Second
	c.HTTP.IdleTimeout, c.HTTP.WriteTimeout = time.Second, time.Second
}

// closedByServer reads conn until the server closes it, and fails the test
// when that takes longer than within (the server held the connection).
func closedByServer(t *testing.T, conn net.Conn, within time.Duration, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server still held the connection after %s", what, within)
	}
}

// A client that sends its headers or body slowly, or keeps a connection
// idle, is cut off by the HTTP timeouts; an agent's WebSocket and a log
// follow outlive them, because they take a deadline per write instead.
//
// B101: read-header, read, idle and per-write timeouts.
func TestSlowClientsAreCutOffAndStreamsOutliveTheTimeouts(t *testing.T) {
	t.Parallel()
	s := startServer(t, shortHTTPTimeouts)
	hook := addHookSource(t, s)
	localRun(t, s, map[string]string{"held": heldWorkflow(t.TempDir())})

	// An agent and a log follower, connected before the slow clients.
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	run := triggerOne(t, s.Client, "app")
	r, d := rawHolder(t, s, secret, true)
	lines := make(chan string, 16)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	followed := make(chan error, 1)
	go func() {
		followed <- s.Client.FollowLogs(ctx, run.ID, "held", func(l api.LogLine) error {
			lines <- l.Text
			return nil
		})
	}()
	connected := time.Now()

	// A body that trickles in is cut off after read_timeout.
	body, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	fmt.Fprintf(body, "POST %s HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{", hook)
	go func() { // one byte every 100 ms, until the server hangs up
		for {
			if _, err := body.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// Headers that never end are cut off after read_header_timeout.
	head, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer head.Close()
	fmt.Fprintf(head, "POST %s HTTP/1.1\r\nHost: kiln\r\n", hook)
	// A kept-alive connection is closed after idle_timeout.
	idle, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /health HTTP/1.1\r\nHost: kiln\r\n\r\n")
	br := bufio.NewReader(idle)
	if status, err := br.ReadString('\n'); err != nil || !strings.Contains(status, "200") {
		t.Fatalf("GET /health: %q %v", status, err)
	}

	closedByServer(t, body, 20*time.Second, "a trickling body")
	closedByServer(t, head, 20*time.Second, "unfinished headers")
	closedByServer(t, idle, 20*time.Second, "an idle keep-alive connection")

	// Well past every timeout, the agent's socket and the follow still work.
	for time.Since(connected) < 3*time.Second {
		r.send(&proto.Heartbeat{})
		time.Sleep(200 * time.Millisecond)
	}
	r.send(&proto.Log{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Step: 0,
		Lines: []proto.LogLine{{Seq: 1, Stream: "stdout", Text: "still here", TimeMS: time.Now().UnixMilli()}}})
	select {
	case l := <-lines:
		if l != "still here" {
			t.Fatalf("the follower got %q", l)
		}
	case err := <-followed:
		t.Fatalf("the log follow ended after the HTTP timeouts: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the follower got no line")
	}
	select {
	case <-r.done:
		t.Fatalf("the agent's connection ended: %v", r.err)
	default:
	}
}
