package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/retention"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// server is one of two servers sharing a database and shared storage (the
// world's backend standing in for the bucket): its own log directory,
// whose log store ships to the storage, and its own garbage collector.
type server struct {
	dir      string
	logs     *logstore.Store
	leader   *leader
	gc       *retention.Collector
	stopShip func() // ends the log store's shipper (nil: not running)
}

// startShipping runs the log store's shipper, as a server's start does:
// it ships at once what the files on disk hold that the storage lacks.
func (s *server) startShipping() {
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- s.logs.Run(ctx) }()
	s.stopShip = func() { cancel(); <-done; s.stopShip = nil }
}

func (w *world) server(t *testing.T, cfg retention.Config) *server {
	t.Helper()
	s := &server{dir: t.TempDir(), leader: &leader{}}
	var err error
	if s.logs, err = logstore.Open(logstore.Config{Dir: s.dir, Archive: w.be, ShipInterval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	s.startShipping()
	t.Cleanup(func() {
		if s.stopShip != nil {
			s.stopShip()
		}
		s.logs.Close()
	})
	cfg.Clock = w.clock.Now
	cfg.Hooks.Deleted = func(kind string, n int) {
		w.mu.Lock()
		w.deleted[kind] += n
		w.mu.Unlock()
	}
	if s.gc, err = retention.New(w.db, w.be, s.logs, w.caches, s.leader, cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// newRun creates a run of one job, finished unless open.
func (w *world) newRun(t *testing.T, open bool) (runID, jobID string) {
	t.Helper()
	ev, _ := json.Marshal(kiln.Event{Name: kiln.EventPush, Branch: "main", DefaultBranch: "main", Repository: "acme/app"})
	cr, err := w.db.Runs().Create(bg, store.NewRun{Source: "gh", Repository: "acme/app", Workflow: "ci", Event: ev,
		Jobs: []store.NewJob{{Name: "build", Steps: []string{"s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !open {
		if _, err := w.db.Runs().Cancel(bg, cr.ID, "done", true); err != nil {
			t.Fatal(err)
		}
	}
	return cr.ID, cr.Jobs["build"]
}

// stepLog writes two lines of a step on s, as its agent's frames would,
// ends the step and waits until the shipper put them in the storage.
func (s *server) stepLog(t *testing.T, w *world, runID, jobID string) logstore.Ref {
	t.Helper()
	ref := logstore.Ref{RunID: runID, JobID: jobID, Epoch: 1, Step: 0}
	if _, err := s.logs.Append(ref, []logstore.Line{{Seq: 1, Stream: "stdout", Text: "one", TimeMS: 1}, {Seq: 2, Stream: "stdout", Text: "two", TimeMS: 2}}); err != nil {
		t.Fatal(err)
	}
	s.logs.CloseStep(ref)
	last := fmt.Sprintf("%020d", 2)
	waittest.Until(t, waittest.Timeout, "the step's log shipped", func() bool {
		objs, _, _ := w.be.List(bg, logstore.ArchivePrefix(runID), "", 10)
		return len(objs) > 0 && strings.HasSuffix(objs[len(objs)-1].Key, last)
	})
	return ref
}

// stray is a line a previous process stored and never shipped.
const stray = `{"seq":3,"stream":"stdout","text":"never shipped","time_ms":3}` + "\n"

// leftover writes on s the step file a previous process of it left: three
// lines, of which it had shipped the first two before it died.
func (s *server) leftover(t *testing.T, w *world, runID, jobID string) logstore.Ref {
	t.Helper()
	ref := logstore.Ref{RunID: runID, JobID: jobID, Epoch: 1, Step: 0}
	shipped := `{"seq":1,"stream":"stdout","text":"one","time_ms":1}` + "\n" + `{"seq":2,"stream":"stdout","text":"two","time_ms":2}` + "\n"
	p := filepath.Join(s.dir, runID, jobID, "e1", "0.jsonl")
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(shipped+stray), 0o640); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("%s%s/e1/0/%020d-%020d", logstore.ArchivePrefix(runID), jobID, 1, 2)
	if _, err := w.be.Put(bg, key, strings.NewReader(shipped), nil); err != nil {
		t.Fatal(err)
	}
	return ref
}

func (s *server) has(runID string) bool {
	_, err := os.Stat(filepath.Join(s.dir, runID))
	return err == nil
}

// B152: two servers share a database and the storage; the follower's
// agents ran the steps, so their log files are in the follower's
// data_dir/logs. The follower's own passes — it never leads — remove its
// files of a finished run whose every line is in the storage; once the
// leader's garbage collector purged an expired run, they remove the
// follower's files of that run too (one of its lines never reached the
// storage, so only the purge lets them go). They keep the files of a run that finished within the grace, of an
// unfinished run, of a finished run with a line the storage lacks, and of
// a run the database does not know. A pass looks at a bounded number of
// run directories (here one), continuing where the last stopped; the
// kept file goes once the storage has its last line, which the follower's
// shipper puts there when it runs again.
//
// Proves B152 (docs/behaviours.md).
func TestEveryServerRemovesItsOwnLogFilesOfPurgedAndShippedRuns(t *testing.T) {
	clock := storetest.NewClock()
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		w := newWorld(t, db, clock)
		lead := w.server(t, retention.Config{Runs: 24 * time.Hour})
		lead.leader.on.Store(true)
		follow := w.server(t, retention.Config{Runs: 24 * time.Hour, Batch: 1, LocalGrace: 10 * time.Minute, Interval: time.Millisecond})

		// The purged run's file has a line the storage lacks: only the
		// purge removes it.
		purged, purgedJob := w.newRun(t, false)
		follow.leftover(t, w, purged, purgedJob)
		clock.Advance(48 * time.Hour)
		shipped, shippedJob := w.newRun(t, false)
		follow.stepLog(t, w, shipped, shippedJob)
		partial, partialJob := w.newRun(t, false)
		ref := follow.leftover(t, w, partial, partialJob)
		clock.Advance(time.Hour)
		recent, recentJob := w.newRun(t, false)
		follow.stepLog(t, w, recent, recentJob)
		open, openJob := w.newRun(t, true)
		follow.stepLog(t, w, open, openJob)
		// The follower's shipper stops (as if the server were down): a
		// file with a line the storage lacks is handed to it by a pass
		// and waits there, kept.
		follow.stopShip()
		stranger := "zzzz-not-a-run-here"
		if err := os.MkdirAll(filepath.Join(follow.dir, stranger, "job", "e1"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(follow.dir, stranger, "job", "e1", "0.jsonl"), []byte(stray), 0o640); err != nil {
			t.Fatal(err)
		}

		// The follower's passes before the purge remove only the shipped
		// run's files, one run directory looked at per pass.
		removed := 0
		for range 7 {
			n, err := follow.gc.LocalPass(bg)
			if err != nil || n > 1 {
				t.Fatalf("a local pass: %d, %v", n, err)
			}
			removed += n
		}
		if removed != 1 || follow.has(shipped) || !follow.has(purged) {
			t.Fatalf("before the purge: removed %d; shipped there %v, purged there %v", removed, follow.has(shipped), follow.has(purged))
		}
		if _, err := w.db.Runs().Get(bg, shipped); err != nil {
			t.Fatalf("the shipped run went with its local files: %v", err)
		}
		lines, err := follow.logs.Read(logstore.Ref{RunID: shipped, JobID: shippedJob, Epoch: 1, Step: 0}, 0, 10)
		if err != nil || len(lines) != 2 || lines[1].Text != "two" {
			t.Fatalf("the shipped run's log read from the storage: %+v, %v", lines, err)
		}

		// The leader purges the expired run (its segments, its rows).
		if st, err := lead.gc.Pass(bg); err != nil || st[retention.KindRuns] != 1 {
			t.Fatalf("the leader's pass: %v, %v", st, err)
		}
		if !follow.has(purged) {
			t.Fatal("the leader removed the follower's files")
		}
		for range 7 {
			if _, err := follow.gc.LocalPass(bg); err != nil {
				t.Fatal(err)
			}
		}
		if follow.has(purged) {
			t.Fatal("the follower kept its files of the purged run")
		}
		for name, id := range map[string]string{"partial": partial, "recent": recent, "open": open, "stranger": stranger} {
			if !follow.has(id) {
				t.Fatalf("the follower removed the %s run's files", name)
			}
		}
		if w.deleted[retention.KindLocalLogs] != 2 {
			t.Fatalf("counted %v", w.deleted)
		}

		// The follower's shipper runs again (the server restarted): it
		// ships the line the storage lacks (B153), and the follower's
		// collector, running as it does on a server that does not lead,
		// removes the file.
		follow.startShipping()
		waittest.Until(t, waittest.Timeout, "the follower ships the line the storage lacks", func() bool {
			lines, err := lead.logs.Read(ref, 0, 10)
			return err == nil && len(lines) == 3 && lines[2].Text == "never shipped"
		})
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() { done <- follow.gc.Run(ctx) }()
		waittest.Until(t, waittest.Timeout, "the follower removes the file once all of it is shipped", func() bool { return !follow.has(partial) })
		cancel()
		<-done
		if !follow.has(recent) || !follow.has(open) || !follow.has(stranger) {
			t.Fatal("the follower's collector removed files it must keep")
		}

		// The record of the purge goes PurgedRunsKept later.
		if fates, err := db.Retention().RunFates(bg, []string{purged}); err != nil || !fates[purged].Purged {
			t.Fatalf("the purge's record: %+v, %v", fates, err)
		}
		clock.Advance(retention.PurgedRunsKept + time.Hour)
		if _, err := lead.gc.Pass(bg); err != nil {
			t.Fatal(err)
		}
		if fates, err := db.Retention().RunFates(bg, []string{purged}); err != nil || len(fates) != 0 {
			t.Fatalf("the purge's record after %s: %+v, %v", retention.PurgedRunsKept, fates, err)
		}
	}, storetest.WithClock(clock.Now))
}
