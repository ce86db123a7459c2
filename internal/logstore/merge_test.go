package logstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/waittest"
)

// countingArchive counts the segments fetched, to show a reader uses its
// own file where it holds a segment's lines.
type countingArchive struct {
	Archive
	gets atomic.Int64
}

func (c *countingArchive) Get(ctx context.Context, key string) (io.ReadCloser, storage.Object, error) {
	c.gets.Add(1)
	return c.Archive.Get(ctx, key)
}

// wantSeqs fails unless got holds exactly the seqs from..to, each once, in
// order, with the text lines() gives them.
func wantSeqs(t *testing.T, who string, got []Line, from, to uint64) {
	t.Helper()
	if len(got) != int(to-from+1) {
		t.Fatalf("%s read %d lines, want %d..%d: %v", who, len(got), from, to, seqList(got))
	}
	for i, l := range got {
		if l.Seq != from+uint64(i) || l.Text != fmt.Sprintf("line %d", l.Seq) {
			t.Fatalf("%s: line %d is %+v, want seq %d: %v", who, i, l, from+uint64(i), seqList(got))
		}
	}
}

func seqList(ls []Line) []uint64 {
	out := make([]uint64, len(ls))
	for i, l := range ls {
		out[i] = l.Seq
	}
	return out
}

// readAll reads a step page by page, as the API does.
func readAll(t *testing.T, s *Store, page int) []Line {
	t.Helper()
	var out []Line
	var after uint64
	for {
		got, err := s.Read(ref, after, page)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got...)
		if len(got) < page {
			return out
		}
		after = got[len(got)-1].Seq
	}
}

// B154: server A stores lines 1..50 of a step and ships only 1..20 before
// it is killed; the agent replays 45..50 (never acknowledged) and goes on
// to 100 with server B, which ships 45..100. Every reader then lacks
// 21..44 — until A restarts and ships them, as a segment that falls
// between the two others although a later one exists. Then every server
// reads 1..100 once and in order, in pages of any size, B without
// fetching the segment its own file holds; and A's own file, which starts
// at line 1, no longer hides the lines B holds.
//
// Proves B154 (docs/behaviours.md).
func TestAHoleLeftByAKilledServerIsFilledWhenItRestarts(t *testing.T) {
	fsb, err := fs.Open(fs.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	arch := &countingArchive{Archive: fsb}
	ctx := context.Background()
	dirA := t.TempDir()
	a, err := Open(Config{Dir: dirA, Archive: arch})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ref, lines(1, 20)); err != nil {
		t.Fatal(err)
	}
	if err := a.ship(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ref, lines(21, 50)); err != nil {
		t.Fatal(err)
	}
	a.Close() // killed: 21..50 acknowledged, never shipped

	b, err := Open(Config{Dir: t.TempDir(), Archive: arch})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Append(ref, lines(45, 100)); err != nil {
		t.Fatal(err)
	}
	b.CloseStep(ref)
	b.shipDirty(ctx)
	got, err := b.Read(ref, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20+56 || got[19].Seq != 20 || got[20].Seq != 45 {
		t.Fatalf("before A restarts, B should read 1..20 and 45..100: %v", seqList(got))
	}

	a, err = Open(Config{Dir: dirA, Archive: arch, ShipInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	// The hour-long interval: only the shipping at start can do it.
	waittest.Until(t, 10*time.Second, "A to ship the lines B lacks", func() bool {
		got, err := b.Read(ref, 0, 1000)
		return err == nil && len(got) == 100
	})
	segs, err := b.segments(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range segs {
		names = append(names, fmt.Sprintf("%d-%d", g.first, g.last))
	}
	if fmt.Sprint(names) != "[1-20 21-44 45-100]" {
		t.Fatalf("segments %v, want A's hole shipped alone (21-44), nothing twice", names)
	}
	for _, page := range []int{1, 7, 20, 25, 1000} {
		wantSeqs(t, fmt.Sprintf("B in pages of %d", page), readAll(t, b, page), 1, 100)
		wantSeqs(t, fmt.Sprintf("A in pages of %d", page), readAll(t, a, page), 1, 100)
	}
	if last, err := a.Last(ref); err != nil || last != 100 {
		t.Fatalf("A's Last = %d, %v; want 100 (its file ends at 50, B's lines are in the archive)", last, err)
	}
	before := arch.gets.Load()
	got, err = b.Read(ref, 44, 1000)
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "B after 44", got, 45, 100)
	if n := arch.gets.Load() - before; n != 0 {
		t.Fatalf("B fetched %d segments for lines its own file holds", n)
	}
}

// B154: segments that overlap (two servers shipped the same replayed
// lines), a file that shares some of their lines and adds its own, and a
// seq the agent skipped: the merge returns each seq once, in order.
//
// Proves B154 (docs/behaviours.md).
func TestMergeTakesEachLineOnceFromOverlappingSegmentsAndTheFile(t *testing.T) {
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
	put := func(first, last uint64) {
		var body []byte
		for _, l := range lines(first, last) {
			if l.Seq != 33 { // skipped by the agent: in no copy
				body = appendLine(body, &l)
			}
		}
		if _, err := be.Put(ctx, segmentKey(ref, first, last), bytes.NewReader(body), storage.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 30)
	put(20, 40)
	put(25, 28)
	put(70, 80)
	if _, err := s.Append(ref, lines(35, 75)); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, s, 6)
	want := append(seqList(lines(1, 32)), seqList(lines(34, 80))...)
	if fmt.Sprint(seqList(got)) != fmt.Sprint(want) {
		t.Fatalf("merged %v\nwant   %v", seqList(got), want)
	}
}

// B154: a shipped segment never spans a jump in seqs, so its name says
// which lines it holds.
//
// Proves B154 (docs/behaviours.md).
func TestDenseRunCutsAtAJump(t *testing.T) {
	var chunk []byte
	for _, n := range []uint64{41, 42, 43, 101, 102} {
		chunk = appendLine(chunk, &Line{Seq: n, Stream: "stdout", Text: "x"})
	}
	for _, c := range []struct {
		hi          uint64
		first, last uint64
	}{{1 << 62, 41, 43}, {42, 41, 42}, {40, 0, 0}} {
		run, first, last, err := denseRun(chunk, c.hi)
		if err != nil || first != c.first || last != c.last || (len(run) == 0) != (c.last == 0) {
			t.Fatalf("hi %d: %d-%d (%d bytes), %v; want %d-%d", c.hi, first, last, len(run), err, c.first, c.last)
		}
	}
}
