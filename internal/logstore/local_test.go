package logstore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnci/kiln/internal/storage/fs"
)

// B152: RemoveShipped deletes a finished run's step file only when every
// complete line of it is in the archive's segments — whichever server
// shipped them, seqs the agent skipped not counting — and keeps a file
// with a line the archive lacks, one still open for writing, and anything
// that is not a step file.
//
// Proves B152 (docs/behaviours.md).
func TestRemoveShippedKeepsWhatTheArchiveLacks(t *testing.T) {
	be, err := fs.Open(fs.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Dir: t.TempDir(), Archive: be})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	seqs := func(ns ...uint64) []byte {
		var b []byte
		for _, n := range ns {
			b = appendLine(b, &Line{Seq: n, Stream: "stdout", Text: "x", TimeMS: 1})
		}
		return b
	}
	cases := []struct {
		name     string
		file     []byte
		segments [][2]uint64
		removed  bool
	}{
		{"all shipped", seqs(1, 2, 3), [][2]uint64{{1, 3}}, true},
		{"shipped in pieces, seqs skipped between", seqs(1, 2, 5, 6), [][2]uint64{{1, 2}, {5, 6}}, true},
		{"a middle line missing", seqs(1, 2, 3, 4), [][2]uint64{{1, 2}, {4, 4}}, false},
		{"the last line missing", seqs(1, 2, 3), [][2]uint64{{1, 2}}, false},
		{"the first line missing", seqs(1, 2, 3), [][2]uint64{{2, 3}}, false},
		{"nothing shipped", seqs(1, 2), nil, false},
		{"a file from mid-step, the rest shipped by another server", seqs(4, 5, 6), [][2]uint64{{1, 3}, {4, 9}}, true},
		{"a torn last line is no line", append(seqs(1, 2), `{"seq":3,"stream":"std`...), [][2]uint64{{1, 2}}, true},
		{"an empty file", nil, nil, true},
	}
	for i, c := range cases {
		r := Ref{RunID: "run-" + string(rune('a'+i)), JobID: "job1", Epoch: 1, Step: 0}
		p, _ := s.path(r)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, c.file, 0o640); err != nil {
			t.Fatal(err)
		}
		for _, g := range c.segments {
			if _, err := be.Put(ctx, segmentKey(r, g[0], g[1]), bytes.NewReader(nil), nil); err != nil {
				t.Fatal(err)
			}
		}
		kept, err := s.RemoveShipped(ctx, r.RunID)
		_, statErr := os.Stat(filepath.Join(s.dir, r.RunID))
		if err != nil || (kept == 0) != c.removed || os.IsNotExist(statErr) != c.removed {
			t.Errorf("%s: kept %d, %v; run directory there: %v; want removed %v", c.name, kept, err, statErr == nil, c.removed)
		}
	}

	// A step still open for writing stays, however much of it is shipped;
	// so does a file that is not a step's.
	open := Ref{RunID: "run-open", JobID: "job1", Epoch: 1, Step: 0}
	if _, err := s.Append(open, lines(1, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := be.Put(ctx, segmentKey(open, 1, 2), bytes.NewReader(nil), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "run-open", "job1", "notes.txt"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if kept, err := s.RemoveShipped(ctx, open.RunID); err != nil || kept != 2 {
		t.Fatalf("an open step: kept %d, %v", kept, err)
	}
	s.CloseStep(open) // the shipper would take it now; it has not run
	if kept, err := s.RemoveShipped(ctx, open.RunID); err != nil || kept != 2 {
		t.Fatalf("a step waiting for the shipper: kept %d, %v", kept, err)
	}
	s.shipDirty(ctx)
	if kept, err := s.RemoveShipped(ctx, open.RunID); err != nil || kept != 1 {
		t.Fatalf("after shipping: kept %d, %v", kept, err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "run-open", "job1", "notes.txt")); err != nil {
		t.Fatalf("the file that is not a step's: %v", err)
	}

	// A purged run's directory goes whole.
	if err := s.RemoveLocalRun("run-open"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "run-open")); !os.IsNotExist(err) {
		t.Fatalf("after RemoveLocalRun: %v", err)
	}
	if runs, err := s.LocalRuns("", 100); err != nil || len(runs) != 4 {
		t.Fatalf("local runs left: %v, %v", runs, err)
	}
}
