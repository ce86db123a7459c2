package logstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadAfterSeeks reads every page position of a log whose lines vary
// from empty to longer than the search's read buffer, with a torn line at
// the end, and checks each answer against the lines written.
func TestReadAfterSeeks(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	const n = 700
	var want []Line
	for i := uint64(1); i <= n; i++ {
		text := fmt.Sprintf("line %d", i)
		switch {
		case i%97 == 0:
			text = strings.Repeat("long ", 2000) // 10 KB, over the 4 KiB probe
		case i%13 == 0:
			text = ""
		}
		want = append(want, Line{Seq: i, Stream: "stdout", Text: text, TimeMS: int64(i)})
	}
	for i := 0; i < n; i += 50 {
		if _, err := s.Append(ref, want[i:min(i+50, n)]); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	f, err := os.OpenFile(filepath.Join(dir, "run1", "job1", "e1", "0.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":701,"stream":"stdout","te`) // a write in progress
	f.Close()
	s, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for after := uint64(0); after <= n+2; after++ {
		got, err := s.Read(ref, after, 3)
		if err != nil {
			t.Fatalf("read after %d: %v", after, err)
		}
		var exp []Line
		if after < n {
			exp = want[after:min(after+3, n)]
		}
		if len(got) != len(exp) {
			t.Fatalf("read after %d: %d lines, want %d", after, len(got), len(exp))
		}
		for i := range got {
			if got[i] != exp[i] {
				t.Fatalf("read after %d: line %d = %+v, want %+v", after, i, got[i], exp[i])
			}
		}
	}
}

// BenchmarkReadLastPage reads the last 1,000 lines of a 200,000-line log,
// what a viewer catching up on a long step does page after page.
func BenchmarkReadLastPage(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 200_000
	batch := make([]Line, 500)
	text := strings.Repeat("a", 100)
	for seq := uint64(0); seq < n; {
		for i := range batch {
			seq++
			batch[i] = Line{Seq: seq, Stream: "stdout", Text: text, TimeMS: 1}
		}
		if _, err := s.Append(ref, batch); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		got, err := s.Read(ref, n-1000, 1000)
		if err != nil || len(got) != 1000 {
			b.Fatalf("%d lines, %v", len(got), err)
		}
	}
}
