package logstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/waittest"
)

// pair is two servers' log stores sharing one archive: the agent's (a),
// which writes, and another (b), which has no file of its own.
func pair(t *testing.T) (a, b *Store) {
	t.Helper()
	be, err := fs.Open(fs.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	mk := func() *Store {
		s, err := Open(Config{Dir: t.TempDir(), Archive: be, ShipInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
		return s
	}
	return mk(), mk()
}

// B201: a finished step's log, and a running step's lines as they are
// shipped, read the same on a server that has no file of it.
func TestLogsReadTheSameOnAnotherServer(t *testing.T) {
	a, b := pair(t)
	if _, err := a.Append(ref, lines(1, 300)); err != nil {
		t.Fatal(err)
	}
	// Live: the running step's lines reach b within a ship interval.
	waittest.Until(t, 10*time.Second, "b reads the running step's lines", func() bool {
		got, err := b.Read(ref, 0, 1000)
		return err == nil && len(got) == 300
	})
	if _, err := a.Append(ref, lines(301, 500)); err != nil {
		t.Fatal(err)
	}
	a.CloseStep(ref)
	waittest.Until(t, 10*time.Second, "b reads the finished step", func() bool {
		last, err := b.Last(ref)
		return err == nil && last == 500
	})
	steps, err := b.Steps(ref.RunID, ref.JobID, ref.Epoch)
	if err != nil || len(steps) != 1 || steps[0] != 0 {
		t.Fatalf("steps on b: %v, %v", steps, err)
	}
	// Paging after a seq, across segments, answers what a answers.
	for _, after := range []uint64{0, 1, 299, 300, 301, 499, 500} {
		want, _ := a.Read(ref, after, 120)
		got, err := b.Read(ref, after, 120)
		if err != nil || len(got) != len(want) {
			t.Fatalf("after %d: b read %d lines (%v), a %d", after, len(got), err, len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("after %d: line %d = %+v, want %+v", after, i, got[i], want[i])
			}
		}
	}
	if n, _ := b.Read(Ref{RunID: "run1", JobID: "job1", Epoch: 1, Step: 1}, 0, 10); len(n) != 0 {
		t.Fatalf("a step never logged read %d lines", len(n))
	}
}

// B201: a server restarted before shipping ships what its files hold past
// what the archive has, once and without duplicates.
func TestLeftoverFilesAreShippedAtStart(t *testing.T) {
	be, err := fs.Open(fs.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first, err := Open(Config{Dir: dir, Archive: be})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Append(ref, lines(1, 50)); err != nil {
		t.Fatal(err)
	}
	if err := first.ship(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Append(ref, lines(51, 80)); err != nil {
		t.Fatal(err)
	}
	first.Close() // crashed before shipping 51..80

	ctx, cancel := context.WithCancel(context.Background())
	second, err := Open(Config{Dir: dir, Archive: be, ShipInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	done := make(chan struct{})
	go func() { defer close(done); _ = second.Run(ctx) }()
	defer func() { cancel(); <-done }()
	reader, err := Open(Config{Dir: t.TempDir(), Archive: be})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	waittest.Until(t, 10*time.Second, "the leftover lines shipped", func() bool {
		last, err := reader.Last(ref)
		return err == nil && last == 80
	})
	got, err := reader.Read(ref, 0, 1000)
	if err != nil || len(got) != 80 {
		t.Fatalf("read %d lines, %v; want 80", len(got), err)
	}
	for i, l := range got {
		if l.Seq != uint64(i+1) {
			t.Fatalf("line %d has seq %d: duplicated or out of order", i, l.Seq)
		}
	}
}
