package retention_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/artifacts"
	"github.com/kilnci/kiln/internal/caches"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/retention"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

var bg = context.Background()

func TestMain(m *testing.M) { storetest.Main(m) }

type leader struct {
	on    atomic.Bool
	calls atomic.Int64
}

func (l *leader) Leading() (store.LeaderLease, bool) {
	l.calls.Add(1)
	return store.LeaderLease{}, l.on.Load()
}

type world struct {
	db      *store.DB
	clock   *storetest.Clock
	be      *fs.Backend
	logs    *logstore.Store
	logDir  string
	arts    *artifacts.Service
	caches  *caches.Service
	leader  *leader
	mu      sync.Mutex
	deleted map[string]int
}

func newWorld(t *testing.T, db *store.DB, clock *storetest.Clock) *world {
	t.Helper()
	w := &world{db: db, clock: clock, leader: &leader{}, deleted: map[string]int{}, logDir: t.TempDir()}
	var err error
	if w.be, err = fs.Open(fs.Config{Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if w.logs, err = logstore.Open(logstore.Config{Dir: w.logDir, Archive: w.be}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.logs.Close() })
	if w.arts, err = artifacts.New(db, w.be, artifacts.Config{}); err != nil {
		t.Fatal(err)
	}
	if w.caches, err = caches.New(db, w.be, caches.Config{Clock: clock.Now}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) collector(t *testing.T, cfg retention.Config) *retention.Collector {
	t.Helper()
	cfg.Clock = w.clock.Now
	cfg.Hooks.Deleted = func(kind string, n int) {
		w.mu.Lock()
		w.deleted[kind] += n
		w.mu.Unlock()
	}
	c, err := retention.New(w.db, w.be, w.logs, w.caches, w.leader, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run creates a run of one job on branch main, with a log line, an
// artifact and a shipped log segment, and finishes it unless open.
func (w *world) run(t *testing.T, open bool) (runID, jobID string) {
	t.Helper()
	ev, _ := json.Marshal(kiln.Event{Name: kiln.EventPush, Branch: "main", DefaultBranch: "main", Repository: "acme/app"})
	cr, err := w.db.Runs().Create(bg, store.NewRun{Source: "gh", Repository: "acme/app", Workflow: "ci", Event: ev,
		Jobs: []store.NewJob{{Name: "build", Steps: []string{"s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	runID, jobID = cr.ID, cr.Jobs["build"]
	ref := logstore.Ref{RunID: runID, JobID: jobID, Epoch: 1, Step: 0}
	if _, err := w.logs.Append(ref, []logstore.Line{{Seq: 1, Text: "hello"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.be.Put(bg, logstore.ArchivePrefix(runID)+"seg", strings.NewReader("x"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.arts.Store(bg, runID, jobID, "dist", strings.NewReader("artifact")); err != nil {
		t.Fatal(err)
	}
	if !open {
		if _, err := w.db.Runs().Cancel(bg, runID, "done", true); err != nil {
			t.Fatal(err)
		}
		if r, _ := w.db.Runs().Get(bg, runID); !r.Status.Terminal() {
			t.Fatalf("the run is %s", r.Status)
		}
	}
	return runID, jobID
}

func (w *world) gone(t *testing.T, runID string) bool {
	t.Helper()
	_, err := w.db.Runs().Get(bg, runID)
	_, statErr := os.Stat(filepath.Join(w.logDir, runID))
	objs, _, _ := w.be.List(bg, artifacts.RunPrefix(runID), "", 10)
	logs, _, _ := w.be.List(bg, logstore.ArchivePrefix(runID), "", 10)
	return err != nil && os.IsNotExist(statErr) && len(objs) == 0 && len(logs) == 0
}

// B220: a pass deletes the runs that finished more than retention.runs ago
// — their rows, their jobs', their log files and archived segments, and
// their artifacts — a bounded batch at a time, and keeps unfinished and
// recent runs whole; the deletions are counted for the metrics.
func TestExpiredRunsGoWithEverythingTheyHold(t *testing.T) {
	clock := storetest.NewClock()
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		w := newWorld(t, db, clock)
		old1, _ := w.run(t, false)
		old2, _ := w.run(t, false)
		open, _ := w.run(t, true)
		clock.Advance(48 * time.Hour)
		recent, _ := w.run(t, false)
		clock.Advance(time.Hour)
		c := w.collector(t, retention.Config{Runs: 24 * time.Hour, Batch: 1})
		for i, want := range []int{1, 1, 0} {
			st, err := c.Pass(bg)
			if err != nil || st[retention.KindRuns] != want {
				t.Fatalf("pass %d: %v, %v; want %d runs", i+1, st, err, want)
			}
		}
		if !w.gone(t, old1) || !w.gone(t, old2) {
			t.Fatal("an expired run is left")
		}
		if w.gone(t, recent) || w.gone(t, open) {
			t.Fatal("a recent or unfinished run was deleted")
		}
		for _, id := range []string{recent, open} {
			if arts, _ := db.Artifacts().List(bg, id); len(arts) != 1 {
				t.Fatalf("run %s's artifacts: %+v", id, arts)
			}
		}
		if w.deleted[retention.KindRuns] != 2 {
			t.Fatalf("counted %v", w.deleted)
		}
	}, storetest.WithClock(clock.Now))
}

// B221: artifacts go retention.artifacts after their upload (their run
// stays), and caches retention.caches after their last save or restore: a
// cache restored since stays.
func TestArtifactsAndCachesExpire(t *testing.T) {
	clock := storetest.NewClock()
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		w := newWorld(t, db, clock)
		runID, jobID := w.run(t, false)
		for _, k := range []string{"k-old", "k-used"} {
			if _, err := w.caches.Save(bg, jobID, k, strings.NewReader(k)); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(10 * 24 * time.Hour)
		body, _, ok, err := w.caches.Restore(bg, jobID, "k-used", nil)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		body.Close()
		clock.Advance(24 * time.Hour)
		c := w.collector(t, retention.Config{Artifacts: 7 * 24 * time.Hour, Caches: 7 * 24 * time.Hour})
		st, err := c.Pass(bg)
		if err != nil || st[retention.KindArtifacts] != 1 || st[retention.KindCaches] != 1 || st[retention.KindRuns] != 0 {
			t.Fatalf("pass: %v, %v", st, err)
		}
		if _, err := db.Runs().Get(bg, runID); err != nil {
			t.Fatalf("the run went with its artifact: %v", err)
		}
		if arts, _ := db.Artifacts().List(bg, runID); len(arts) != 0 {
			t.Fatalf("artifacts left: %+v", arts)
		}
		if objs, _, _ := w.be.List(bg, artifacts.RunPrefix(runID), "", 10); len(objs) != 0 {
			t.Fatalf("artifact bodies left: %+v", objs)
		}
		if _, _, ok, _ := w.caches.Restore(bg, jobID, "k-old", nil); ok {
			t.Fatal("the unused cache is still there")
		}
		body, _, ok, err = w.caches.Restore(bg, jobID, "k-used", nil)
		if err != nil || !ok {
			t.Fatalf("the restored cache went: %v %v", ok, err)
		}
		body.Close()
		if objs, _, _ := w.be.List(bg, caches.Prefix, "", 10); len(objs) != 1 {
			t.Fatalf("cache objects: %+v", objs)
		}
	}, storetest.WithClock(clock.Now))
}

// B222: the webhook event log's processed entries go retention.deliveries
// after receipt, unprocessed ones stay, and a redelivery id is remembered
// for webhooks.dedup_ttl even when retention.deliveries is shorter.
func TestDeliveriesExpireButDedupLastsItsTTL(t *testing.T) {
	clock := storetest.NewClock()
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		w := newWorld(t, db, clock)
		done, _, err := db.Ingress().Record(bg, store.NewDelivery{Source: "gh", DeliveryID: "d-1", Event: "push", Owner: "me"})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Ingress().Finish(bg, done, "me", kiln.DeliveryProcessed, "", nil); err != nil {
			t.Fatal(err)
		}
		waiting, _, err := db.Ingress().Record(bg, store.NewDelivery{Source: "gh", DeliveryID: "d-2", Event: "push"})
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Hour) // webhooks.dedup_ttl is 24h
		c := w.collector(t, retention.Config{Deliveries: time.Hour})
		st, err := c.Pass(bg)
		if err != nil || st[retention.KindDeliveries] != 1 || st[retention.KindDedup] != 0 {
			t.Fatalf("pass: %v, %v", st, err)
		}
		if _, err := db.Ingress().Get(bg, done); err == nil {
			t.Fatal("the processed delivery is still logged")
		}
		if _, err := db.Ingress().Get(bg, waiting); err != nil {
			t.Fatalf("the unprocessed delivery went: %v", err)
		}
		if _, dup, err := db.Ingress().Record(bg, store.NewDelivery{Source: "gh", DeliveryID: "d-1", Event: "push"}); !dup || err != nil {
			t.Fatalf("a redelivery within the dedup TTL: duplicate %v, %v", dup, err)
		}
		clock.Advance(store.DefaultDedupTTL)
		if st, err := c.Pass(bg); err != nil || st[retention.KindDedup] != 2 {
			t.Fatalf("after the dedup TTL: %v, %v", st, err)
		}
	}, storetest.WithClock(clock.Now))
}

// B223: the collector runs on the leader only: while this server does not
// lead nothing is deleted; once it leads, its passes delete.
func TestOnlyTheLeaderCollects(t *testing.T) {
	clock := storetest.NewClock()
	w := newWorld(t, storetest.New(t, storetest.WithClock(clock.Now)), clock)
	old, _ := w.run(t, false)
	clock.Advance(48 * time.Hour)
	c := w.collector(t, retention.Config{Runs: time.Hour, Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waittest.Until(t, waittest.Timeout, "several ticks as a follower", func() bool { return w.leader.calls.Load() >= 5 })
	if w.gone(t, old) {
		t.Fatal("a follower deleted a run")
	}
	w.leader.on.Store(true)
	waittest.Until(t, waittest.Timeout, "the leader deletes the run", func() bool { return w.gone(t, old) })
}
