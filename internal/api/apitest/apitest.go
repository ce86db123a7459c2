// Package apitest starts the real API for tests: a real store, engine,
// ingress processor and log store, a local git source whose repository is a
// real git repository in a temporary directory, an admin token, and an
// httptest server on 127.0.0.1. The API's tests, the CLI's tests and the
// end-to-end tests share it.
package apitest

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/store"
)

// Workflow is the workflow the test repository carries: a push to main or
// a dispatch starts build, then test.
const Workflow = `name: ci
on:
  push:
    branches: [main]
  dispatch:
    inputs:
      target: {type: choice, options: [staging, production], default: staging}
jobs:
  build:
    runs_on: [linux]
    steps:
      - name: compile
        run: echo compile
      - name: vet
        run: echo vet
  test:
    needs: [build]
    runs_on: [linux]
    steps:
      - name: unit
        run: echo unit
`

// SourceName is the local source the harness configures.
const SourceName = "app"

// Harness is a running API and everything behind it.
type Harness struct {
	URL     string
	Token   string // an admin token
	DB      *store.DB
	Engine  *engine.Engine
	Ingress *ingress.Processor
	Logs    *logstore.Store
	Fleet   *Fleet
	Client  *api.Client
	Repo    string // the local source's git repository
	Server  *httptest.Server
	archive logstore.Archive
	cfg     api.Config
}

// Option adjusts the API's Config.
type Option func(*api.Config)

// New starts the API over db, a fresh store of any backend opened with the
// engine's Releaser (storetest.ReleaseWith(engine.Release)). No fleet runs:
// jobs stay queued.
func New(t testing.TB, db *store.DB, opts ...Option) *Harness {
	return NewShared(t, db, nil, opts...)
}

// NewShared is New with step logs shipped to archive (nil: none), as a
// server on S3 storage ships them; Peer adds another server reading it.
func NewShared(t testing.TB, db *store.DB, archive logstore.Archive, opts ...Option) *Harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	eng := engine.New(db, nil, engine.Config{})
	proc := ingress.New(db, eng, ingress.NewSources(db, forge.Options{}), ingress.Config{PollInterval: 50 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = proc.Run(ctx) }()
	logs, err := openLogs(t, ctx, &wg, archive)
	if err != nil {
		t.Fatal(err)
	}
	fleet := &Fleet{}
	cfg := api.Config{LogPollInterval: 20 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	h, err := api.New(api.Deps{DB: db, Engine: eng, Ingress: proc, Logs: logs, Fleet: fleet,
		CredentialWarnings: loopbackWarnings}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Requests run under ctx, so cleanup ends streams (log follows) a
	// failed test left open instead of waiting on them forever.
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
		logs.Close()
	})
	_, token, err := db.Auth().CreateAdminToken(ctx, "tests", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := api.NewClient(srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	hs := &Harness{URL: srv.URL, Token: token, DB: db, Engine: eng, Ingress: proc, Logs: logs,
		Fleet: fleet, Client: client, Server: srv, archive: archive, cfg: cfg}
	hs.Repo = newRepo(t)
	src := forge.Source{Name: SourceName, Kind: kiln.SourceLocal, Local: &forge.LocalConfig{Path: hs.Repo}}
	if _, err := client.AddSource(ctx, src); err != nil {
		t.Fatalf("add source: %v", err)
	}
	return hs
}

// loopbackWarnings are forge.CredentialWarnings asking only forges on this
// host (the tests' fakes): a test never reaches out to github.com.
func loopbackWarnings(ctx context.Context, src *forge.Source) []string {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrPermission}
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial}}
	return forge.CredentialWarnings(ctx, src, forge.Options{HTTPClient: hc})
}

// GitEnv is the environment the harness runs git with: no user or system
// configuration, a fixed author.
func GitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Ada Lovelace", "GIT_AUTHOR_EMAIL=ada@example.com",
		"GIT_COMMITTER_NAME=Ada Lovelace", "GIT_COMMITTER_EMAIL=ada@example.com")
}

// Git runs git in dir and returns its trimmed output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = GitEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a git repository with the workflow committed on main.
func newRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app")
	Git(t, "", "init", "-q", "-b", "main", dir)
	if err := os.MkdirAll(filepath.Join(dir, ".kiln", "workflows"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".kiln", "workflows", "ci.yml"), []byte(Workflow), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, dir, "add", ".")
	Git(t, dir, "commit", "-q", "-m", "add ci")
	return dir
}

// Commit adds a commit to the repository's main branch and returns its sha.
func (h *Harness) Commit(t testing.TB, file, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.Repo, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, h.Repo, "add", ".")
	Git(t, h.Repo, "commit", "-q", "-m", "change "+file)
	return Git(t, h.Repo, "rev-parse", "HEAD")
}

// Dispatch starts the ci workflow and returns the new run.
func (h *Harness) Dispatch(t testing.TB) api.Run {
	t.Helper()
	d, err := h.Client.Dispatch(context.Background(), api.DispatchRequest{Source: SourceName, Workflow: "ci.yml"}, true)
	if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 {
		t.Fatalf("dispatch: %s (%s), runs %v", d.Status, d.Message, d.Runs)
	}
	run, err := h.Client.GetRun(context.Background(), d.Runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// Linux is an agent offering the labels the test workflow asks for.
var Linux = kiln.AgentLabels{Labels: kiln.NewLabels("linux", "amd64")}

// Lease is a job an agent of the test holds.
type Lease struct {
	store.Lease
	RunID string
	Name  string
}

// Claim plays an agent: it claims the next queued job, starts it and
// returns its lease.
func (h *Harness) Claim(t testing.TB, agentID string) Lease {
	t.Helper()
	l := h.Dispatched(t, agentID)
	if err := h.DB.Jobs().Start(context.Background(), l.Lease); err != nil {
		t.Fatal(err)
	}
	return l
}

// Dispatched plays an agent that claimed the next queued job and has not
// started it yet.
func (h *Harness) Dispatched(t testing.TB, agentID string) Lease {
	t.Helper()
	ctx := context.Background()
	claimed, err := h.DB.Queue().Claim(ctx, agentID, Linux, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %d jobs", err, len(claimed))
	}
	c := claimed[0]
	return Lease{Lease: store.Lease{JobID: c.JobID, Epoch: c.Epoch}, RunID: c.RunID, Name: c.Name}
}

// Log appends lines to a step of a held job, numbered from seq.
func (h *Harness) Log(t testing.TB, l Lease, step int, seq uint64, texts ...string) {
	t.Helper()
	lines := make([]logstore.Line, len(texts))
	for i, text := range texts {
		lines[i] = logstore.Line{Seq: seq + uint64(i), Stream: "stdout", Text: text, TimeMS: time.Now().UnixMilli()}
	}
	ref := logstore.Ref{RunID: l.RunID, JobID: l.JobID, Epoch: l.Epoch, Step: step}
	if _, err := h.Logs.Append(ref, lines); err != nil {
		t.Fatal(err)
	}
}

// Finish completes a held job with status (success, failed or cancelled).
func (h *Harness) Finish(t testing.TB, l Lease, status kiln.JobStatus) {
	t.Helper()
	eff, err := h.DB.Jobs().Complete(context.Background(), store.Completion{Lease: l.Lease, Status: status})
	if err != nil {
		t.Fatal(err)
	}
	h.Engine.Apply(eff)
}

// Fleet is a stand-in for the agents' side in API tests: a fixed list of
// connected agents, with what was drained and disconnected recorded.
type Fleet struct {
	mu           sync.Mutex
	Connected    []api.AgentView
	Drained      []string
	Disconnected []string
}

// Agents lists the connected agents.
func (f *Fleet) Agents() []api.AgentView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.AgentView(nil), f.Connected...)
}

// Drain marks a connected agent draining.
func (f *Fleet) Drain(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.Connected {
		if f.Connected[i].ID == id {
			f.Connected[i].Draining = true
			f.Drained = append(f.Drained, id)
			return nil
		}
	}
	return kiln.Errorf(kiln.CodeNotFound, "agent %s is not connected", id)
}

// DisconnectToken records the token and drops its agents.
func (f *Fleet) DisconnectToken(tokenID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Disconnected = append(f.Disconnected, tokenID)
	kept := f.Connected[:0]
	for _, a := range f.Connected {
		if a.TokenID != tokenID {
			kept = append(kept, a)
		}
	}
	f.Connected = kept
}

// Connect adds a connected agent.
func (f *Fleet) Connect(a api.AgentView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Connected = append(f.Connected, a)
}

// AutoAgent plays an agent in the background until the test ends: it
// claims every queued job, writes one log line per step and ends the job
// with outcome(job name).
func (h *Harness) AutoAgent(t testing.TB, outcome func(job string) kiln.JobStatus) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			claimed, err := h.DB.Queue().Claim(ctx, "auto-agent", Linux, 4)
			if err != nil {
				continue
			}
			for _, c := range claimed {
				l := store.Lease{JobID: c.JobID, Epoch: c.Epoch}
				if err := h.DB.Jobs().Start(ctx, l); err != nil {
					continue
				}
				ref := logstore.Ref{RunID: c.RunID, JobID: c.JobID, Epoch: c.Epoch, Step: 0}
				_, _ = h.Logs.Append(ref, []logstore.Line{{Seq: 1, Stream: "stdout", Text: "ran " + c.Name, TimeMS: time.Now().UnixMilli()}})
				eff, err := h.DB.Jobs().Complete(ctx, store.Completion{Lease: l, Status: outcome(c.Name)})
				if err == nil {
					h.Engine.Apply(eff)
				}
			}
		}
	}()
}

// openLogs opens a log store in a temporary directory; with an archive,
// its shipper runs until ctx ends.
func openLogs(t testing.TB, ctx context.Context, wg *sync.WaitGroup, archive logstore.Archive) (*logstore.Store, error) {
	logs, err := logstore.Open(logstore.Config{Dir: filepath.Join(t.TempDir(), "logs"), Archive: archive,
		ShipInterval: 20 * time.Millisecond})
	if err != nil || archive == nil {
		return logs, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = logs.Run(ctx) }()
	return logs, nil
}

// Peer starts another API server on the harness's database and archive
// with a log store of its own, as a second kiln server would be: it has no
// file of the logs the harness stores. It returns a client of it.
func (h *Harness) Peer(t testing.TB) *api.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	logs, err := openLogs(t, ctx, &wg, h.archive)
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Deps{DB: h.DB, Engine: h.Engine, Ingress: h.Ingress, Logs: logs, Fleet: h.Fleet,
		CredentialWarnings: loopbackWarnings}, h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(a)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
		logs.Close()
	})
	client, err := api.NewClient(srv.URL, h.Token)
	if err != nil {
		t.Fatal(err)
	}
	return client
}
