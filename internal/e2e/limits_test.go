package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
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

// shortHTTPTimeouts sets the read and write timeouts to one second. (The
// idle timeout stays long: a client reusing a kept-alive connection just as
// the server closes it gets EOF, which is the idle test's alone.)
func shortHTTPTimeouts(c *server.Config) {
	c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout, c.HTTP.WriteTimeout = time.Second, time.Second, time.Second
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

	closedByServer(t, body, 20*time.Second, "a trickling body")
	closedByServer(t, head, 20*time.Second, "unfinished headers")

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

// A kept-alive connection left idle is closed after http.idle_timeout.
//
// B101: read-header, read, idle and per-write timeouts.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.HTTP.IdleTimeout = time.Second })
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
	closedByServer(t, idle, 20*time.Second, "an idle keep-alive connection")
}

// dialFrom upgrades a connection to /ws from the loopback address local
// (127.0.0.x), without authenticating; it returns the HTTP status of a
// refused upgrade.
func dialFrom(t testing.TB, s *kilnServer, local string) (*websocket.Conn, int) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+proto.Path, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		if resp != nil {
			return nil, resp.StatusCode
		}
		t.Fatalf("dial from %s: %v", local, err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws, http.StatusSwitchingProtocols
}

// heapInUse reads the server's go_memstats_heap_inuse_bytes from its
// /metrics, after a collection.
func heapInUse(t testing.TB, s *kilnServer) float64 {
	t.Helper()
	runtime.GC()
	return metricValue(t, s, "go_memstats_heap_inuse_bytes")
}

// metricValue reads one unlabelled series from the server's /metrics.
func metricValue(t testing.TB, s *kilnServer, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.MetricsURL, nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s (status %d)", name, resp.StatusCode)
	return 0
}

// A hundred connections that never authenticate, each sending most of a
// 4 MiB frame, cost the server almost nothing: a connection reads at most
// 4 KiB before it authenticates, and at most 64 such connections from one
// address are let in. Once they are gone an agent connects, and after
// authenticating it may send frames larger than 4 KiB.
//
// B102: unauthenticated WebSockets are bounded in frame size and number.
func TestUnauthenticatedWebSocketsHoldAlmostNoMemory(t *testing.T) {
	s := startServer(t, func(c *server.Config) { c.Agents.AuthTimeout = time.Minute })
	before := heapInUse(t, s)

	var conns []*websocket.Conn
	refused := 0
	for range 100 {
		ws, code := dialFrom(t, s, "127.0.0.1")
		if ws == nil {
			if code != http.StatusServiceUnavailable {
				t.Fatalf("a refused upgrade got %d, want 503", code)
			}
			refused++
			continue
		}
		conns = append(conns, ws)
	}
	if len(conns) != fleet.DefaultMaxUnauthenticatedPerAddress || refused != 100-len(conns) {
		t.Fatalf("%d upgrades accepted, %d refused; want %d accepted from one address",
			len(conns), refused, fleet.DefaultMaxUnauthenticatedPerAddress)
	}
	// Each accepted connection starts a 4 MiB auth frame and sends 3 MiB
	// of it, then waits.
	chunk := []byte(`{"type":"auth","data":{"token":"` + strings.Repeat("k", 64<<10))
	var wg sync.WaitGroup
	for _, ws := range conns {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(bg, 30*time.Second)
			defer cancel()
			w, err := ws.Writer(ctx, websocket.MessageText)
			if err != nil {
				return
			}
			for sent := 0; sent < 3<<20; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return // the server closed the connection: frame too big
				}
			}
		})
	}
	wg.Wait()
	grown := heapInUse(t, s) - before
	t.Logf("the server's heap grew by %.1f MiB under %d partial frames", grown/(1<<20), len(conns))
	if grown > 32<<20 {
		t.Fatalf("the server's heap grew by %.0f MiB while strangers sent partial frames", grown/(1<<20))
	}
	for _, ws := range conns {
		ws.CloseNow()
	}

	// The slots come back; an agent authenticates and registers with a
	// frame larger than 4 KiB.
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	labels := make([]string, kiln.MaxLabels)
	for i := range labels {
		labels[i] = fmt.Sprintf("label-%03d-%s", i, strings.Repeat("x", 90))
	}
	waittest.UntilState(t, 30*time.Second, "the strangers' slots to be released", func() (bool, string) {
		ws, code := dialFrom(t, s, "127.0.0.1")
		if ws != nil {
			ws.CloseNow()
		}
		return ws != nil, fmt.Sprint("upgrade ", code)
	})
	r := dialRaw(t, s.URL)
	if ack := r.handshake(secret, "big-register", labels...); ack == nil {
		t.Fatal("no register.ack")
	}
}

// The limits count per remote address and in all: a second address gets
// its own share until the total is reached.
//
// B102: unauthenticated WebSockets are bounded in frame size and number.
func TestUnauthenticatedWebSocketsAreCappedPerAddressAndInAll(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.Agents.AuthTimeout = time.Minute
		c.Agents.MaxUnauthenticated, c.Agents.MaxUnauthPerAddress = 3, 2
	})
	for i, want := range []struct {
		from string
		code int
	}{
		{"127.0.0.1", 101}, {"127.0.0.1", 101}, {"127.0.0.1", 503}, {"127.0.0.2", 101}, {"127.0.0.3", 503},
	} {
		if _, code := dialFrom(t, s, want.from); code != want.code {
			t.Fatalf("upgrade %d from %s: %d, want %d", i+1, want.from, code, want.code)
		}
	}
	if got := metricValue(t, s, "kiln_agent_unauthenticated_refused_total"); got != 2 {
		t.Fatalf("kiln_agent_unauthenticated_refused_total = %v, want 2", got)
	}
}

// postHook sends a signed delivery to the generic source and returns the
// status.
func postHook(t testing.TB, s *kilnServer, hook, id string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+hook, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Type", "push")
	req.Header.Set("X-Delivery-ID", id)
	req.Header.Set(forge.DefaultSignatureHeader, forge.Sign([]byte(hookSecret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", id, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// partialHook starts a delivery declaring declared bytes, sends sent of
// them, and leaves the request open; it returns once the server has read
// what was sent (the writes went through).
func partialHook(t testing.TB, s *kilnServer, hook string, declared, sent int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/json\r\nX-Event-Type: push\r\n"+
		"X-Signature-256: sha256=%s\r\nContent-Length: %d\r\n\r\n", hook, strings.Repeat("0", 64), declared)
	chunk := []byte(strings.Repeat("x", 64<<10))
	_ = conn.SetWriteDeadline(time.Now().Add(time.Minute))
	for n := 0; n < sent; n += len(chunk) {
		if _, err := conn.Write(chunk[:min(len(chunk), sent-n)]); err != nil {
			t.Fatalf("the server stopped reading a partial body: %v", err)
		}
	}
	return conn
}

// Twenty strangers each send 16 MiB of a 20 MiB webhook body and stop.
// Before its signature is checked a body is held in memory only up to
// webhooks.in_memory_bytes; the rest waits in an unlinked file under
// data_dir/tmp, so the server's heap barely grows, and a genuine delivery
// larger than that bound is still verified and accepted meanwhile.
//
// B103: unverified webhook bodies hold bounded memory.
func TestSlowWebhookBodiesAreSpooledNotHeldInMemory(t *testing.T) {
	s := startServer(t)
	hook := addHookSource(t, s)
	before := heapInUse(t, s)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { partialHook(t, s, hook, 20<<20, 16<<20) })
	}
	wg.Wait()
	waittest.UntilState(t, 30*time.Second, "the server to read the twenty bodies", func() (bool, string) {
		n := s.Ingress.Unverified()
		return n == 20, fmt.Sprint(n, " bodies being read")
	})
	grown := heapInUse(t, s) - before
	t.Logf("the server's heap grew by %.1f MiB under 20 partial 16 MiB bodies", grown/(1<<20))
	if grown > 48<<20 {
		t.Fatalf("the server's heap grew by %.0f MiB while strangers sent partial bodies", grown/(1<<20))
	}
	if ents, err := os.ReadDir(filepath.Join(s.Config.DataDir, "tmp")); err != nil || len(ents) != 0 {
		t.Fatalf("data_dir/tmp lists %d files (%v); spooled bodies are unlinked", len(ents), err)
	}
	big := []byte(`{"event":"push","pad":"` + strings.Repeat("p", 1<<20) + `"}`)
	if code := postHook(t, s, hook, "genuine-1", big); code != http.StatusAccepted {
		t.Fatalf("a genuine 1 MiB delivery got %d, want 202", code)
	}
}

// When webhooks.max_unverified bodies are being read, another delivery
// waits for a slot, then gets 503 without its body being read; once the
// slow one is cut off by the read timeout, deliveries are accepted again.
//
// B103: unverified webhook bodies hold bounded memory.
func TestWebhooksBeyondTheUnverifiedCapGet503(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout = time.Second, 4*time.Second
		c.Webhooks.MaxUnverified = 1
	})
	hook := addHookSource(t, s)
	slow := partialHook(t, s, hook, 1<<20, 1000)
	waittest.UntilState(t, 10*time.Second, "the slow body to hold the slot", func() (bool, string) {
		return s.Ingress.Unverified() == 1, ""
	})
	body := []byte(`{"event":"push"}`)
	if code := postHook(t, s, hook, "waits", body); code != http.StatusServiceUnavailable {
		t.Fatalf("a delivery beyond the cap got %d, want 503", code)
	}
	closedByServer(t, slow, 20*time.Second, "the slow body")
	waittest.UntilState(t, 10*time.Second, "the slot to be free", func() (bool, string) {
		return s.Ingress.Unverified() == 0, ""
	})
	if code := postHook(t, s, hook, "after", body); code != http.StatusAccepted {
		t.Fatalf("a delivery after the slow one was cut off got %d, want 202", code)
	}
}

// An agent-token holder that writes 22 MiB into one step gets 10 MiB of
// it stored — the executor's own cap, enforced by the server — and a
// marker line saying the server truncated it; every frame is still
// acknowledged, so an honest agent would not replay the dropped lines.
//
// B104: the server enforces the per-step log cap.
func TestAnAgentCannotStoreMoreThanTheStepLogCap(t *testing.T) {
	t.Parallel()
	if logstore.DefaultMaxStepBytes != executor.DefaultMaxLogBytesPerStep {
		t.Fatalf("the server's cap (%d) is not the executor's (%d)", logstore.DefaultMaxStepBytes, executor.DefaultMaxLogBytesPerStep)
	}
	s := startServer(t)
	localRun(t, s, map[string]string{"held": heldWorkflow(t.TempDir())})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	run := triggerOne(t, s.Client, "app")
	r, d := rawHolder(t, s, secret, true)

	text := strings.Repeat("x", proto.MaxLineBytes-1) // 64 KiB a line with its newline
	var seq uint64
	for range 6 { // 6 frames of 60 lines: 22.5 MiB
		lines := make([]proto.LogLine, 60)
		for i := range lines {
			seq++
			lines[i] = proto.LogLine{Seq: seq, Stream: "stdout", Text: text, TimeMS: time.Now().UnixMilli()}
		}
		r.send(&proto.Log{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Step: 0, Lines: lines})
	}
	sent := r.seq
	waittest.UntilState(t, 30*time.Second, "every log frame to be acknowledged", func() (bool, string) {
		for {
			select {
			case m := <-r.frames:
				if a, ok := m.(*proto.Ack); ok && a.Seq >= sent {
					return true, ""
				}
			default:
				return false, ""
			}
		}
	})

	var stored int64
	var last api.LogLine
	err := s.Client.Logs(bg, run.ID, api.LogQuery{Job: "held"}, func(l api.LogLine) error {
		stored += int64(len(l.Text)) + 1
		last = l
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stored %d bytes of 22.5 MiB; the last line: %.90q", stored, last.Text)
	if stored > logstore.DefaultMaxStepBytes+1024 || !strings.HasPrefix(last.Text, logstore.TruncatedByServer) || last.Stream != "system" {
		t.Fatalf("stored %d bytes (cap %d), last line %.90q", stored, logstore.DefaultMaxStepBytes, last.Text)
	}
}
