// Package storetest opens real stores for tests: SQLite in a temporary
// directory, and PostgreSQL — a fresh database per test on a private server
// it starts from the installed binaries, or on KILN_TEST_POSTGRES_URL. The
// conformance suite runs every test on both through ForEach.
//
// A test binary using PostgreSQL must call Main from its TestMain so the
// private server is stopped when the tests end:
//
//	func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }
//
// or hand M(m) to a wrapper that runs the tests, such as goleak's:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }
package storetest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

// Option adjusts the Config a test store is opened with.
type Option func(*store.Config)

// WithClock makes the store read time from clock.
func WithClock(clock func() time.Time) Option {
	return func(c *store.Config) { c.Clock = clock }
}

// WithConfig applies f to the Config (URL and Clock included).
func WithConfig(f func(*store.Config)) Option { return Option(f) }

// ReleaseWith opens the store with r as its Releaser (engine.Release, or a
// test's own). Without it, stores are opened with QueueAsCreated.
func ReleaseWith(r store.Releaser) Option {
	return func(c *store.Config) { c.Releaser = r }
}

// QueueAsCreated is the Releaser of tests of the store alone: every job
// whose needs are met is queued with the requirement and spec it was
// created with.
func QueueAsCreated(store.ReadyJob) store.Release { return store.Release{} }

// Main runs the tests and then stops the private PostgreSQL server, if one
// was started. Call it from TestMain.
func Main(m *testing.M) int { return M(m).Run() }

// M is m whose Run also stops the private PostgreSQL server when the tests
// end, before a wrapper checks what they left behind.
func M(m *testing.M) interface{ Run() int } { return runner{m} }

type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	stopServer()
	return code
}

// New opens a fresh SQLite store in t.TempDir().
func New(t testing.TB, opts ...Option) *store.DB {
	t.Helper()
	return open(t, SQLiteURL(t), opts)
}

// SQLiteURL returns the URL of a fresh SQLite database in t.TempDir().
func SQLiteURL(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "kiln.db")
}

// NewPostgres opens a store on a fresh PostgreSQL database, or skips the
// test loudly when no PostgreSQL is available.
func NewPostgres(t testing.TB, opts ...Option) *store.DB {
	t.Helper()
	return open(t, PostgresURL(t), opts)
}

// Backend names a database the suite runs on.
type Backend struct {
	Name string
	// URL returns the URL of a fresh database (skipping the test when the
	// backend is unavailable).
	URL func(t testing.TB) string
}

// Backends are SQLite and PostgreSQL.
var Backends = []Backend{
	{Name: "sqlite", URL: SQLiteURL},
	{Name: "postgres", URL: PostgresURL},
}

// ForEach runs fn as a subtest on a fresh store of each backend.
func ForEach(t *testing.T, fn func(t *testing.T, db *store.DB), opts ...Option) {
	t.Helper()
	for _, b := range Backends {
		t.Run(b.Name, func(t *testing.T) {
			fn(t, open(t, b.URL(t), opts))
		})
	}
}

func open(t testing.TB, url string, opts []Option) *store.DB {
	t.Helper()
	cfg := store.Config{URL: url, Releaser: QueueAsCreated}
	for _, o := range opts {
		o(&cfg)
	}
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open store %s: %v", url, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Clock is a fake clock tests advance by hand. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed, millisecond-aligned time.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
