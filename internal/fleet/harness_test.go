package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

func TestMain(m *testing.M) {
	executor.MaybeRunShim()
	if os.Getenv(idleClientsEnv) != "" {
		os.Exit(idleClientsChild())
	}
	if os.Getenv(agentChildEnv) != "" {
		os.Exit(agentChild())
	}
	goleak.VerifyTestMain(storetest.M(m))
}

var bg = context.Background()

// testEngine stands in for the engine: it applies the effects of the
// fleet's operations (Fleet.Effects) and the harness's own, recording them
// and, like the engine, waking the fleet for queued jobs and forwarding
// cancels.
type testEngine struct {
	f       atomic.Pointer[Fleet]
	onApply func(store.Effects)
}

func (e *testEngine) Apply(eff store.Effects) {
	if e.onApply != nil {
		e.onApply(eff)
	}
	f := e.f.Load()
	if f == nil {
		return
	}
	f.Wake(eff.Queued)
	for _, c := range eff.Cancel {
		f.Cancel(c, false, "cancelled")
	}
}

// harness is a fleet serving on 127.0.0.1 over a real store.
type harness struct {
	t       testing.TB
	backend string
	db      *store.DB
	dbURL   string
	logDir  string
	logs    *logstore.Store
	f       *Fleet
	eng     *testEngine
	srv     *httptest.Server
	url     string
	clock   *storetest.Clock // nil: real time
	stop    func()
}

type options struct {
	cfg       Config
	store     func(*store.Config)
	fakeClock bool
	dbURL     string // reuse a database (restart tests)
	logDir    string
	addr      string // listen on this address (a restarted orchestrator)
	onApply   func(store.Effects)
	creds     CloneCredentials // default NoCredentials
}

// fastConfig is a Config with short intervals for tests.
func fastConfig() Config {
	return Config{SweepInterval: 5 * time.Millisecond, RedriveInterval: 50 * time.Millisecond,
		AuthTimeout: 2 * time.Second, RegisterTimeout: 2 * time.Second, WriteTimeout: 5 * time.Second,
		Logger: testLogger()}
}

func testLogger() *slog.Logger {
	if os.Getenv("KILN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// backends runs fn on SQLite and PostgreSQL.
func backends(t *testing.T, fn func(t *testing.T, backend storetest.Backend)) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) { fn(t, b) })
	}
}

func start(t testing.TB, b storetest.Backend, o options) *harness {
	t.Helper()
	h := &harness{t: t, backend: b.Name, eng: &testEngine{onApply: o.onApply}}
	before := goleak.IgnoreCurrent()
	scfg := store.Config{URL: o.dbURL, Releaser: storetest.QueueAsCreated}
	if scfg.URL == "" {
		scfg.URL = b.URL(t)
	}
	h.dbURL = scfg.URL
	if o.fakeClock {
		h.clock = storetest.NewClock()
		scfg.Clock = h.clock.Now
	}
	if o.store != nil {
		o.store(&scfg)
	}
	db, err := store.Open(bg, scfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	h.db = db
	h.logDir = o.logDir
	if h.logDir == "" {
		h.logDir = t.TempDir()
	}
	h.logs, err = logstore.Open(logstore.Config{Dir: h.logDir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.cfg
	if h.clock != nil {
		cfg.Clock = h.clock.Now
	}
	creds := o.creds
	if creds == nil {
		creds = NoCredentials{}
	}
	h.f, err = New(db, h.logs, creds, cfg)
	if err != nil {
		t.Fatalf("new fleet: %v", err)
	}
	h.eng.f.Store(h.f)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for eff := range h.f.Effects() {
			h.eng.Apply(eff)
		}
	}()
	h.srv = httptest.NewUnstartedServer(h.f.Handler())
	if o.addr != "" {
		h.srv.Listener.Close()
		var l net.Listener
		waittest.Until(t, waittest.Timeout, "listening on "+o.addr, func() bool {
			l, err = net.Listen("tcp", o.addr)
			return err == nil
		})
		h.srv.Listener = l
	}
	h.srv.Start()
	h.url = "ws" + strings.TrimPrefix(h.srv.URL, "http")
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- h.f.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
			<-applied
			h.srv.Close()
			h.logs.Close()
			db.Close()
		})
	}
	t.Cleanup(func() {
		h.stop()
		// Run returned, so every goroutine the fleet started has ended;
		// what the test started after the harness (agents, other
		// harnesses) ended in the cleanups that ran before this one.
		if err := goleak.Find(before); err != nil {
			t.Errorf("goroutines left after the fleet stopped: %v", err)
		}
	})
	waittest.Until(t, waittest.Timeout, "the fleet accepts agents", func() bool { return h.f.accepting.Load() })
	return h
}

// token creates an agent token and returns its secret.
func (h *harness) token(spec store.AgentTokenSpec) (store.AgentToken, string) {
	h.t.Helper()
	if spec.Name == "" {
		spec.Name = "test"
	}
	tk, secret, err := h.db.Auth().CreateAgentToken(bg, spec)
	if err != nil {
		h.t.Fatal(err)
	}
	return tk, secret
}

// testJob is a job of a run the harness creates.
type testJob struct {
	name        string
	runsOn      []string
	exclude     []string
	onAgentLost store.OnAgentLost
	needs       []string
	checkout    *jobspec.Checkout
}

func job(name string, runsOn ...string) testJob { return testJob{name: name, runsOn: runsOn} }

// specJSON is what the engine stores as a job's spec.
func specJSON(name string) json.RawMessage { return specWith(name, nil) }

// specWith is the spec of a job whose code lives at checkout.
func specWith(name string, checkout *jobspec.Checkout) json.RawMessage {
	j := jobspec.Job{Agent: proto.JobSpec{Name: name, Workflow: "ci", Steps: []proto.Step{{Name: "build", Run: "echo hi"}}},
		Checkout: checkout}
	b, err := j.Encode()
	if err != nil {
		panic(err)
	}
	return b
}

// run creates a run of the jobs (released at once unless they have needs)
// and hands its effects to the engine; it returns the job ids by name.
func (h *harness) run(jobs ...testJob) (string, map[string]string) {
	h.t.Helper()
	nr := store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main", SHA: "abc",
		Event: json.RawMessage(`{"name":"push"}`)}
	for _, j := range jobs {
		nj := store.NewJob{Name: j.name, Requirement: kiln.Requirement{RunsOn: kiln.NewLabels(j.runsOn...), Exclude: kiln.NewLabels(j.exclude...)},
			Spec: specWith(j.name, j.checkout), Steps: []string{"build", "test"}, OnAgentLost: j.onAgentLost}
		for _, n := range j.needs {
			nj.Needs = append(nj.Needs, store.NeedEdge{Job: n})
		}
		nr.Jobs = append(nr.Jobs, nj)
	}
	cr, err := h.db.Runs().Create(bg, nr)
	if err != nil {
		h.t.Fatalf("create run: %v", err)
	}
	h.eng.Apply(cr.Effects)
	return cr.ID, cr.Jobs
}

func (h *harness) job(id string) store.Job {
	h.t.Helper()
	j, err := h.db.Jobs().Get(bg, id)
	if err != nil {
		h.t.Fatalf("get job: %v", err)
	}
	return j
}

// waitStatus waits until the job has the status.
func (h *harness) waitStatus(id string, want kiln.JobStatus) store.Job {
	h.t.Helper()
	var j store.Job
	waittest.UntilState(h.t, waittest.Timeout, fmt.Sprintf("job %s %s", id, want), func() (bool, string) {
		j = h.job(id)
		return j.Status == want, fmt.Sprintf("%+v", j)
	})
	return j
}

func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	if h.clock == nil {
		h.t.Fatal("advance needs a fake clock")
	}
	h.clock.Advance(d)
}

// sweeps waits for n more monitor ticks to complete.
func (h *harness) sweeps(n int) {
	h.t.Helper()
	var count atomic.Int32
	ch := make(chan struct{}, 1)
	hook := func() {
		if count.Add(1) >= int32(n) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	h.f.hooks.swept.Store(&hook)
	defer h.f.hooks.swept.Store(nil)
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		h.t.Fatal("the monitor did not sweep")
	}
}

// client is a scripted agent: it speaks the protocol frame by frame.
type client struct {
	t       testing.TB
	ws      *websocket.Conn
	in      chan proto.Message
	errs    chan *proto.Error
	acked   atomic.Uint64
	acks    atomic.Int64 // ack frames received
	done    chan struct{}
	readErr error
	seq     uint64
	id      string
	connID  string // from auth.ok
}

func dial(t testing.TB, url string) *client {
	t.Helper()
	ws, _, err := websocket.Dial(bg, url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(proto.MaxFrameBytes)
	c := &client{t: t, ws: ws, in: make(chan proto.Message, 1024), errs: make(chan *proto.Error, 64), done: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() { ws.CloseNow() })
	return c
}

func (c *client) readLoop() {
	defer close(c.done)
	for {
		_, b, err := c.ws.Read(bg)
		if err != nil {
			c.readErr = err
			return
		}
		_, m, err := proto.Decode(b)
		if err != nil {
			c.readErr = fmt.Errorf("the orchestrator sent an undecodable frame %q: %w", b, err)
			return
		}
		switch m := m.(type) {
		case *proto.Ack:
			c.acked.Store(m.Seq)
			c.acks.Add(1)
		case *proto.Error:
			select {
			case c.errs <- m:
			default:
			}
		default:
			c.in <- m
		}
	}
}

func (c *client) send(m proto.Message) {
	c.t.Helper()
	var seq uint64
	if proto.Durable(m.Type()) {
		c.seq++
		seq = c.seq
	}
	b, err := proto.Encode(seq, m)
	if err != nil {
		c.t.Fatal(err)
	}
	c.raw(b)
}

// sendSeq sends a durable frame with an explicit seq (replays).
func (c *client) sendSeq(seq uint64, m proto.Message) {
	c.t.Helper()
	b, err := proto.Encode(seq, m)
	if err != nil {
		c.t.Fatal(err)
	}
	c.raw(b)
}

func (c *client) raw(b []byte) {
	c.t.Helper()
	if err := c.ws.Write(bg, websocket.MessageText, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next returns the next frame other than ack and error.
func (c *client) next() proto.Message {
	c.t.Helper()
	select {
	case m := <-c.in:
		return m
	case <-c.done:
		c.t.Fatalf("connection ended while waiting for a frame: %v", c.readErr)
	case <-time.After(30 * time.Second):
		c.t.Fatal("timed out waiting for a frame")
	}
	return nil
}

func expect[T proto.Message](c *client) T {
	c.t.Helper()
	m := c.next()
	v, ok := m.(T)
	if !ok {
		c.t.Fatalf("got %s frame %+v, want %T", m.Type(), m, v)
	}
	return v
}

// quiet asserts no frame arrives for a moment.
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case m := <-c.in:
		c.t.Fatalf("unexpected %s frame %+v", m.Type(), m)
	case <-time.After(d):
	}
}

// errorFrame waits for an error frame.
func (c *client) errorFrame() *proto.Error {
	c.t.Helper()
	select {
	case e := <-c.errs:
		return e
	case <-time.After(30 * time.Second):
		c.t.Fatal("timed out waiting for an error frame")
	}
	return nil
}

// closed waits for the connection to end and returns the close code and
// reason the orchestrator sent.
func (c *client) closed() (int, string) {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.t.Fatal("timed out waiting for the connection to close")
	}
	var ce websocket.CloseError
	if errors.As(c.readErr, &ce) {
		return int(ce.Code), ce.Reason
	}
	return -1, fmt.Sprint(c.readErr)
}

func (c *client) waitAck(seq uint64) {
	c.t.Helper()
	waittest.Until(c.t, waittest.Timeout, fmt.Sprintf("ack %d", seq), func() bool { return c.acked.Load() >= seq })
}

// reg is a registration to send.
type reg struct {
	id       string
	labels   []string
	maxJobs  int
	inFlight []proto.InFlight
	// secret is the agent's secret (B113); "": testSecret(id).
	secret string
}

// testSecret is the secret a test agent registers id with, unless the
// test says otherwise: the same for every connection of the id.
func testSecret(id string) string {
	sum := sha256.Sum256([]byte("test secret " + id))
	return hex.EncodeToString(sum[:])
}

// handshake authenticates and registers.
func (c *client) handshake(token string, r reg) *proto.RegisterAck {
	c.t.Helper()
	c.send(&proto.Auth{Token: token, ProtocolVersion: proto.Version})
	c.connID = expect[*proto.AuthOK](c).ConnectionID
	if r.maxJobs == 0 {
		r.maxJobs = 1
	}
	c.id = r.id
	if r.secret == "" {
		r.secret = testSecret(r.id)
	}
	c.send(&proto.Register{AgentID: r.id, AgentSecret: r.secret, Labels: r.labels, MaxJobs: r.maxJobs, InFlight: r.inFlight,
		OS: "linux", Arch: "amd64", Hostname: "host-" + r.id, Version: "test"})
	return expect[*proto.RegisterAck](c)
}

// connect dials, authenticates and registers.
func (h *harness) connect(token string, r reg) (*client, *proto.RegisterAck) {
	h.t.Helper()
	c := dial(h.t, h.url)
	return c, c.handshake(token, r)
}

// runJob plays a dispatched job to its end: ack, running, a log line,
// the given status.
func (c *client) runJob(d *proto.Dispatch, status kiln.JobStatus) {
	c.t.Helper()
	c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
	c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
	c.send(&proto.Log{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Step: 0, Lines: []proto.LogLine{{Seq: 1, Stream: proto.StreamStdout, Text: "hi"}}})
	c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: status, Time: time.Now()})
	c.waitAck(c.seq)
}
