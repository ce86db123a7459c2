package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/caches"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// observedSettle is the fleet's Settle, set once the harness's database
// is open, telling the test when a success starts waiting in it.
type observedSettle struct {
	s       atomic.Pointer[caches.Settle]
	entered chan string
}

func (o *observedSettle) Enabled() bool { return o.s.Load().Enabled() }

func (o *observedSettle) Wait(ctx context.Context, jobID string) time.Duration {
	o.entered <- jobID
	return o.s.Load().Wait(ctx, jobID)
}

// B217: a job's success waits for the uploads it started — the job stays
// running and its dependents pending — until they end, then completes and
// releases them.
func TestSuccessWaitsForTheJobsUploads(t *testing.T) {
	obs := &observedSettle{entered: make(chan string, 4)}
	cfg := fastConfig()
	cfg.Settle = obs
	h := start(t, storetest.Backends[0], options{cfg: cfg})
	obs.s.Store(caches.NewSettle(h.db, caches.SettleConfig{Timeout: time.Minute}))
	_, secret := h.token(store.AgentTokenSpec{})
	_, ids := h.run(job("build"), testJob{name: "test", needs: []string{"build"}})
	c, _ := h.connect(secret, reg{id: "a"})
	d := expect[*proto.Dispatch](c)
	c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
	c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
	c.waitAck(c.seq)

	end, err := obs.s.Load().Begin(bg, d.JobID, "cache", "gomod-1")
	if err != nil {
		t.Fatal(err)
	}
	c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobSuccess, Time: time.Now()})
	if got := <-obs.entered; got != d.JobID {
		t.Fatalf("waited for %s", got)
	}
	if j := h.job(ids["build"]); j.Status != kiln.JobRunning {
		t.Fatalf("build is %s while its upload is in flight", j.Status)
	}
	if j := h.job(ids["test"]); j.Status != kiln.JobPending {
		t.Fatalf("test is %s while build's upload is in flight", j.Status)
	}
	end()
	c.waitAck(c.seq)
	h.waitStatus(ids["build"], kiln.JobSuccess)
	h.waitStatus(ids["test"], kiln.JobQueued)
}

// B218: a success replayed to another coordinator after a reconnect still
// waits for an upload the job started on the old connection: the record is
// in the database, not in the old server's memory. And with the settle
// bounded, a success whose upload never ends is stored after the timeout,
// the record staying until the upload ends.
func TestReplayedSuccessWaitsForAnUploadStartedOnTheOldConnection(t *testing.T) {
	dbURL, logDir := storetest.SQLiteURL(t), t.TempDir()
	sqlite := storetest.Backends[0]
	h1 := start(t, sqlite, options{cfg: fastConfig(), dbURL: dbURL, logDir: logDir})
	_, secret := h1.token(store.AgentTokenSpec{})
	_, ids := h1.run(job("build"), testJob{name: "test", needs: []string{"build"}})
	c, _ := h1.connect(secret, reg{id: "a"})
	d := expect[*proto.Dispatch](c)
	c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
	c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
	c.waitAck(c.seq)

	// Server A's upload service (its own handle on the database) is
	// streaming the job's cache when A's fleet goes away.
	uploadsA, err := store.Open(bg, store.Config{URL: dbURL, Releaser: storetest.QueueAsCreated})
	if err != nil {
		t.Fatal(err)
	}
	defer uploadsA.Close()
	end, err := caches.NewSettle(uploadsA, caches.SettleConfig{Timeout: time.Minute}).Begin(bg, d.JobID, "artifact", "dist")
	if err != nil {
		t.Fatal(err)
	}
	h1.stop()

	obs := &observedSettle{entered: make(chan string, 4)}
	cfg := fastConfig()
	cfg.Settle = obs
	h2 := start(t, sqlite, options{cfg: cfg, dbURL: dbURL, logDir: logDir})
	obs.s.Store(caches.NewSettle(h2.db, caches.SettleConfig{Timeout: time.Minute}))
	back, _ := h2.connect(secret, reg{id: "a", inFlight: []proto.InFlight{{JobID: d.JobID, RunID: d.RunID, LeaseEpoch: 1, Started: true}}})
	back.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobSuccess, Time: time.Now()})
	<-obs.entered
	if j := h2.job(ids["build"]); j.Status.Terminal() {
		t.Fatalf("build is %s while an upload started on server A is in flight", j.Status)
	}
	if j := h2.job(ids["test"]); j.Status != kiln.JobPending {
		t.Fatalf("test is %s", j.Status)
	}
	end()
	back.waitAck(back.seq)
	h2.waitStatus(ids["build"], kiln.JobSuccess)
	h2.waitStatus(ids["test"], kiln.JobQueued)

	// A bounded wait: an upload that never ends holds a success for the
	// timeout only, and its record stays.
	short := caches.NewSettle(h2.db, caches.SettleConfig{Timeout: 20 * time.Millisecond, Poll: 5 * time.Millisecond})
	if _, err := short.Begin(bg, ids["test"], "cache", "stuck"); err != nil {
		t.Fatal(err)
	}
	short.Wait(bg, ids["test"])
	if n, err := h2.db.Uploads().InFlight(bg, ids["test"]); n != 1 || err != nil {
		t.Fatalf("after the timeout: %d records, %v", n, err)
	}
}

// B219: with caches.upload_settle_timeout 0 nothing is recorded or awaited.
func TestADisabledSettleRecordsAndWaitsForNothing(t *testing.T) {
	db := storetest.New(t)
	off := caches.NewSettle(db, caches.SettleConfig{Timeout: 0})
	end, err := off.Begin(bg, "job-1", "cache", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	if n, _ := db.Uploads().InFlight(bg, "job-1"); n != 0 {
		t.Fatalf("a disabled settle recorded %d uploads", n)
	}
	on := caches.NewSettle(db, caches.SettleConfig{Timeout: time.Hour})
	endOn, err := on.Begin(bg, "job-1", "cache", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer endOn()
	off.Wait(bg, "job-1") // would wait an hour if it read the record
}
