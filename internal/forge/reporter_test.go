package forge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/waittest"
)

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	changed chan struct{} // closed and replaced whenever a waiter is added
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// waitFor blocks until someone waits for the clock to reach at: the
// reporter has settled and scheduled its next wake-up for then.
func (c *fakeClock) waitFor(t *testing.T, at time.Time) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		for _, w := range c.waiters {
			if w.at.Equal(at) {
				c.mu.Unlock()
				return
			}
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("nobody waits for %v", at)
		}
	}
}

// recPoster records posts, fails them as told and catches concurrent posts
// of one key.
type recPoster struct {
	mu       sync.Mutex
	calls    []recCall
	inflight map[string]int
	maxPar   int
	overlap  bool
	fail     func(n int, c recCall) error // n counts calls from 1
	gate     chan struct{}                // when set, every post waits for it
	started  chan recCall
}

type recCall struct {
	Repo, SHA string
	St        Status
}

func newRecPoster() *recPoster {
	return &recPoster{inflight: map[string]int{}, started: make(chan recCall, 1000)}
}

func (p *recPoster) PostStatus(ctx context.Context, repo, sha string, st Status) error {
	c := recCall{repo, sha, st}
	key := repo + sha + st.Context
	p.mu.Lock()
	p.calls = append(p.calls, c)
	n := len(p.calls)
	p.inflight[key]++
	if p.inflight[key] > 1 {
		p.overlap = true
	}
	total := 0
	for _, v := range p.inflight {
		total += v
	}
	p.maxPar = max(p.maxPar, total)
	gate, fail := p.gate, p.fail
	p.mu.Unlock()
	p.started <- c
	var err error
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil && fail != nil {
		err = fail(n, c)
	}
	p.mu.Lock()
	p.inflight[key]--
	p.mu.Unlock()
	return err
}

func (p *recPoster) next(t *testing.T) recCall {
	t.Helper()
	select {
	case c := <-p.started:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no post")
		return recCall{}
	}
}

func (p *recPoster) descriptions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.calls {
		out = append(out, c.St.Description)
	}
	return out
}

// runReporter starts r.Run and stops it when the test ends, checking that
// it returns.
func runReporter(t *testing.T, r *StatusReporter) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not stop")
		}
	})
	return cancel
}

func lookupOf(p StatusPoster) PosterLookup {
	return func(_ context.Context, key string) (StatusPoster, error) {
		if key != "src" {
			return nil, kiln.Errorf(kiln.CodeNotFound, "no source %s", key)
		}
		return p, nil
	}
}

func pending(desc string) Status {
	return Status{State: StatePending, Context: "kiln/ci", Description: desc}
}
func done(state State, desc string) Status {
	return Status{State: state, Context: "kiln/ci", Description: desc}
}

// B272: a key's first pending status is posted at once; the pending
// updates after it are coalesced, at most one post per debounce.
func TestReporterDebouncesPending(t *testing.T) {
	clk, p := newFakeClock(), newRecPoster()
	r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk})
	runReporter(t, r)
	t0 := clk.Now()
	r.Report("src", fakeRepo, shaA, pending("queued"))
	if c := p.next(t); c.St.Description != "queued" {
		t.Fatalf("posted %+v, want the first pending update at once", c)
	}
	waittest.Until(t, waittest.Timeout, "the first post is recorded", func() bool { return r.Stats().Posted == 1 && r.Stats().Queued == 0 })
	r.Report("src", fakeRepo, shaA, pending("1 of 3 jobs done"))
	r.Report("src", fakeRepo, shaA, pending("2 of 3 jobs done"))
	clk.waitFor(t, t0.Add(DefaultStatusDebounce))
	if d := p.descriptions(); len(d) != 1 {
		t.Fatalf("posted %v before the debounce ended", d)
	}
	clk.Advance(DefaultStatusDebounce)
	if c := p.next(t); c.St.Description != "2 of 3 jobs done" || c.Repo != fakeRepo || c.SHA != shaA {
		t.Fatalf("posted %+v, want the latest pending update", c)
	}
	waittest.Until(t, waittest.Timeout, "the post is recorded", func() bool { return r.Stats().Posted == 2 && r.Stats().Queued == 0 })

	// Another context on the same commit is independent: its first pending
	// update goes at once.
	r.Report("src", fakeRepo, shaA, Status{State: StatePending, Context: "kiln/release"})
	if c := p.next(t); c.St.Context != "kiln/release" {
		t.Fatalf("posted %+v", c)
	}
}

// A terminal status goes at once, without waiting for the debounce, and
// replaces the pending update the debounce held back. (The first pending
// update goes at once, B272, so it is posted before the held one: posted
// or not when the terminal one arrives was a race.)
func TestReporterTerminalIsPromptAndReplacesPending(t *testing.T) {
	clk, p := newFakeClock(), newRecPoster()
	r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk})
	runReporter(t, r)
	r.Report("src", fakeRepo, shaA, pending("queued"))
	if c := p.next(t); c.St.Description != "queued" {
		t.Fatalf("posted %+v, want the first pending update at once", c)
	}
	waittest.Until(t, waittest.Timeout, "the first post is recorded", func() bool { return r.Stats().Posted == 1 && r.Stats().Queued == 0 })
	r.Report("src", fakeRepo, shaA, pending("running"))
	r.Report("src", fakeRepo, shaA, done(StateSuccess, "all jobs passed"))
	if c := p.next(t); c.St.State != StateSuccess {
		t.Fatalf("post %+v, want the terminal state at once", c)
	}
	waittest.Until(t, waittest.Timeout, "the queue is empty", func() bool { return r.Stats().Queued == 0 })
	clk.Advance(time.Minute)
	if d := p.descriptions(); !slices.Equal(d, []string{"queued", "all jobs passed"}) {
		t.Fatalf("posts %v; the replaced pending update must never be sent", d)
	}
}

// Proves B68 (docs/behaviours.md).
func TestReporterRetriesWithBackoff(t *testing.T) {
	clk, p := newFakeClock(), newRecPoster()
	p.fail = func(n int, _ recCall) error {
		switch n {
		case 1, 2:
			return &APIError{Status: 502, Err: kiln.Errorf(kiln.CodeUnavailable, "GitHub answered with 502").(*kiln.Error)}
		case 3:
			return &APIError{Status: 403, RetryAfter: 30 * time.Second, Err: kiln.Errorf(kiln.CodeUnavailable, "rate limit").(*kiln.Error)}
		}
		return nil
	}
	r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk})
	runReporter(t, r)
	t0 := clk.Now()
	r.Report("src", fakeRepo, shaA, done(StateFailure, "build failed"))
	p.next(t) // attempt 1 at t0
	clk.waitFor(t, t0.Add(time.Second))
	clk.Advance(time.Second)
	p.next(t) // attempt 2 at t0+1s
	clk.waitFor(t, t0.Add(3*time.Second))
	clk.Advance(2 * time.Second)
	p.next(t) // attempt 3 at t0+3s: rate limited for 30s, longer than the 4s backoff
	clk.waitFor(t, t0.Add(33*time.Second))
	clk.Advance(30 * time.Second)
	p.next(t)
	waittest.Until(t, waittest.Timeout, "the post succeeds", func() bool { s := r.Stats(); return s.Posted == 1 && s.Queued == 0 && s.Failed == 0 })
	if d := p.descriptions(); len(d) != 4 {
		t.Errorf("%d attempts, want 4", len(d))
	}
}

func TestReporterGivesUp(t *testing.T) {
	t.Run("refused for good", func(t *testing.T) {
		clk, p := newFakeClock(), newRecPoster()
		p.fail = func(int, recCall) error {
			return &APIError{Status: 404, Err: kiln.Errorf(kiln.CodeNotFound, "no such repository").(*kiln.Error)}
		}
		r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk})
		runReporter(t, r)
		r.Report("src", fakeRepo, shaA, done(StateSuccess, ""))
		r.Report("gone", fakeRepo, shaA, done(StateSuccess, "")) // unknown source
		waittest.Until(t, waittest.Timeout, "both are given up", func() bool { s := r.Stats(); return s.Failed == 2 && s.Queued == 0 })
		if n := len(p.descriptions()); n != 1 {
			t.Errorf("%d posts, want 1 (no retry of a 404)", n)
		}
	})
	t.Run("after MaxAttempts", func(t *testing.T) {
		clk, p := newFakeClock(), newRecPoster()
		p.fail = func(int, recCall) error { return kiln.Errorf(kiln.CodeUnavailable, "down") }
		r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk, MaxAttempts: 3, RetryBase: time.Second})
		runReporter(t, r)
		t0 := clk.Now()
		r.Report("src", fakeRepo, shaA, done(StateSuccess, ""))
		p.next(t)
		clk.waitFor(t, t0.Add(time.Second))
		clk.Advance(time.Second)
		p.next(t)
		clk.waitFor(t, t0.Add(3*time.Second))
		clk.Advance(2 * time.Second)
		p.next(t)
		waittest.Until(t, waittest.Timeout, "it is given up", func() bool { s := r.Stats(); return s.Failed == 1 && s.Queued == 0 })
	})
}

func TestReporterNeverPostsAKeyConcurrently(t *testing.T) {
	clk, p := newFakeClock(), newRecPoster()
	p.gate = make(chan struct{})
	r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk})
	runReporter(t, r)
	r.Report("src", fakeRepo, shaA, pending("started"))
	if c := p.next(t); c.St.State != StatePending {
		t.Fatalf("first post %+v", c)
	}
	// While "started" is in flight the run finishes.
	r.Report("src", fakeRepo, shaA, done(StateFailure, "failed"))
	r.Report("src", fakeRepo, shaB, done(StateSuccess, "other commit"))
	if c := p.next(t); c.SHA != shaB {
		t.Fatalf("post %+v; only the other commit may go while shaA is in flight", c)
	}
	close(p.gate)
	if c := p.next(t); c.SHA != shaA || c.St.State != StateFailure {
		t.Fatalf("post %+v, want shaA's failure after its pending post", c)
	}
	waittest.Until(t, waittest.Timeout, "all are posted", func() bool { return r.Stats().Queued == 0 })
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.overlap {
		t.Error("one key was posted twice at once")
	}
}

func TestReporterWorkersBound(t *testing.T) {
	clk, p := newFakeClock(), newRecPoster()
	p.gate = make(chan struct{})
	r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk, Workers: 2})
	runReporter(t, r)
	for i := range 6 {
		r.Report("src", fakeRepo, fmt.Sprintf("%040d", i+1), done(StateSuccess, ""))
	}
	p.next(t)
	p.next(t)
	close(p.gate)
	waittest.Until(t, waittest.Timeout, "all are posted", func() bool { return r.Stats().Posted == 6 })
	if p.maxPar > 2 {
		t.Errorf("%d posts at once, want at most 2", p.maxPar)
	}
}

func TestReporterQueueFullDropsOldestPending(t *testing.T) {
	clk, p := newFakeClock(), newRecPoster()
	r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk, QueueSize: 2})
	sha := func(c byte) string { return fmt.Sprintf("%c%039d", c, 0) }
	r.Report("src", fakeRepo, sha('a'), pending("A"))
	r.Report("src", fakeRepo, sha('b'), pending("B"))
	r.Report("src", fakeRepo, sha('c'), done(StateSuccess, "C")) // evicts A
	r.Report("src", fakeRepo, sha('d'), done(StateSuccess, "D")) // evicts B
	r.Report("src", fakeRepo, sha('e'), done(StateSuccess, "E")) // no pending left: admitted past the cap
	r.Report("src", fakeRepo, sha('f'), pending("F"))            // full of terminal updates: dropped
	if s := r.Stats(); s.Queued != 3 || s.Dropped != 3 {
		t.Fatalf("stats %+v, want 3 queued and 3 dropped", s)
	}
	runReporter(t, r)
	waittest.Until(t, waittest.Timeout, "the terminal updates are posted", func() bool { return r.Stats().Queued == 0 })
	clk.Advance(time.Minute)
	got := p.descriptions()
	slices.Sort(got)
	if !slices.Equal(got, []string{"C", "D", "E"}) {
		t.Errorf("posted %v, want C, D, E", got)
	}

	// Terminal updates beyond 4×QueueSize push out the oldest terminal one.
	r2 := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk, QueueSize: 1})
	for i := range 5 {
		r2.Report("src", fakeRepo, fmt.Sprintf("%040d", i), done(StateSuccess, fmt.Sprint(i)))
	}
	if s := r2.Stats(); s.Queued != 4 || s.Dropped != 1 {
		t.Errorf("stats %+v, want 4 queued, 1 dropped", s)
	}
}

// Proves B68 (docs/behaviours.md).
func TestReporterReportNeverBlocks(t *testing.T) {
	r := NewStatusReporter(lookupOf(newRecPoster()), ReporterConfig{QueueSize: 100})
	for i := range 10_000 {
		r.Report("src", fakeRepo, fmt.Sprintf("%040d", i), pending("p"))
	}
	if s := r.Stats(); s.Queued != 100 || s.Dropped != 9_900 {
		t.Errorf("stats %+v", s)
	}
}

func TestReporterStopsOnCancel(t *testing.T) {
	clk, p := newFakeClock(), newRecPoster()
	p.gate = make(chan struct{}) // never opened: the post hangs until cancelled
	r := NewStatusReporter(lookupOf(p), ReporterConfig{Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.Report("src", fakeRepo, shaA, Status{State: StateSuccess, Context: "kiln/ci"})
	p.next(t)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	// Reports after Run stopped are still accepted without blocking.
	r.Report("src", fakeRepo, shaB, Status{State: StateSuccess, Context: "kiln/ci"})
}

// TestReporterPostsToGitHub runs the reporter against the fake GitHub.
func TestReporterPostsToGitHub(t *testing.T) {
	f := newFakeForge(t, false, "Bearer tok-123")
	repo, err := NewRepo(apiForges[0].source(f.base()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var lookups sync.WaitGroup
	lookups.Add(1)
	var once sync.Once
	r := NewStatusReporter(func(_ context.Context, key string) (StatusPoster, error) {
		once.Do(lookups.Done)
		if key != "gh" {
			return nil, errors.New("unexpected key")
		}
		return repo, nil
	}, ReporterConfig{Clock: newFakeClock()})
	runReporter(t, r)
	r.Report("gh", fakeRepo, shaA, Status{State: StateSuccess, Context: "kiln/ci", Description: "2 jobs passed", TargetURL: "https://kiln.example/runs/1"})
	waittest.Until(t, waittest.Timeout, "GitHub has the status", func() bool { return len(f.posted()) == 1 })
	lookups.Wait()
	got := f.posted()[0]
	if got.SHA != shaA || got.Body["state"] != "success" || got.Body["description"] != "2 jobs passed" || got.Auth != "Bearer tok-123" {
		t.Errorf("posted %+v", got)
	}
}
