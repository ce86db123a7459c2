package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/waittest"
)

// TestTheLogStartsOverWhileWritesGoOn: with writers that never pause, the
// checkpointer copies the log into the database file and has the writer
// finish, so the log starts over again and again long before the writer's
// own threshold (a checkpoint beside a busy writer alone always ends behind
// it, and the log would grow until then).
func TestTheLogStartsOverWhileWritesGoOn(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kiln.db")
	db, err := Open(ctx, Config{URL: path, Releaser: func(ReadyJob) Release { return Release{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.update(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "CREATE TABLE filler (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Each write rewrites one of 64 rows with 32 KiB: nine log pages a
	// write, the database file staying about 2 MiB. The writers never wait
	// for the checkpointer, but each writes at most once a millisecond:
	// ~150 MB of log a second, where unpaced they wrote 300–700 MB/s on a
	// fast machine (an fsync in 0.12 ms), and the log outgrew the writer's
	// own threshold in the 100 ms between two of the checkpointer's rounds.
	stop := make(chan struct{})
	var writers sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		writers.Go(func() {
			pace := time.NewTicker(time.Millisecond)
			defer pace.Stop()
			for i := w; ; i += 4 {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				if err := db.update(ctx, func(t *txn) error {
					_, err := t.exec(ctx, "INSERT OR REPLACE INTO filler (id, b) VALUES (?, zeroblob(32768))", i%64)
					return err
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	defer func() { close(stop); writers.Wait() }()

	// The log holds restartPages before it is asked to start over; the
	// writer's own threshold is far past twice that.
	first := WALGeneration(path)
	waittest.UntilState(t, time.Minute, "the log to start over twice", func() (bool, string) {
		select {
		case err := <-errs:
			t.Fatalf("a write failed: %v", err)
		default:
		}
		gen := WALGeneration(path)
		return gen >= first+2, fmt.Sprintf("started over %d times", gen-first)
	})
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(writerCheckpointPages) * 4096; st.Size() >= limit {
		t.Errorf("the log grew to %d bytes, the writer's own threshold (%d): the checkpointer did not keep it short", st.Size(), limit)
	}
}
