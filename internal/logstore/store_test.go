package logstore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
)

func open(t *testing.T, maxOpen int) *Store {
	t.Helper()
	s, err := Open(Config{Dir: t.TempDir(), MaxOpenFiles: maxOpen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func lines(from, to uint64) []Line {
	var out []Line
	for i := from; i <= to; i++ {
		out = append(out, Line{Seq: i, Stream: "stdout", Text: fmt.Sprintf("line %d", i), TimeMS: int64(i)})
	}
	return out
}

var ref = Ref{RunID: "run1", JobID: "job1", Epoch: 1, Step: 0}

func TestAppendDropsReplayedLines(t *testing.T) {
	s := open(t, 0)
	if n, err := s.Append(ref, lines(1, 5)); err != nil || n != 5 {
		t.Fatalf("first append: %d, %v", n, err)
	}
	// A replay after a reconnect overlaps what is stored.
	if n, err := s.Append(ref, lines(3, 8)); err != nil || n != 3 {
		t.Fatalf("overlapping append stored %d, %v; want 3", n, err)
	}
	if n, _ := s.Append(ref, lines(1, 8)); n != 0 {
		t.Fatalf("full replay stored %d lines", n)
	}
	got, err := s.Read(ref, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("read %d lines, want 8", len(got))
	}
	for i, l := range got {
		if l.Seq != uint64(i+1) || l.Text != fmt.Sprintf("line %d", i+1) {
			t.Fatalf("line %d = %+v", i, l)
		}
	}
	if tail, _ := s.Read(ref, 6, 100); len(tail) != 2 || tail[0].Seq != 7 {
		t.Fatalf("read after 6: %+v", tail)
	}
	if page, _ := s.Read(ref, 0, 3); len(page) != 3 {
		t.Fatalf("limit 3 read %d", len(page))
	}
}

func TestHighWaterMarkSurvivesReopenAndTornWrite(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ref, lines(1, 10)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Simulate a crash in the middle of a write: a partial last line.
	p := filepath.Join(dir, "run1", "job1", "e1", "0.jsonl")
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":11,"stream":"stdout","te`)
	f.Close()

	s2, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if last, err := s2.LastSeq(ref); err != nil || last != 10 {
		t.Fatalf("last seq after reopen = %d, %v; want 10", last, err)
	}
	if n, err := s2.Append(ref, lines(5, 12)); err != nil || n != 2 {
		t.Fatalf("append after reopen stored %d, %v; want 2", n, err)
	}
	got, err := s2.Read(ref, 0, 100)
	if err != nil || len(got) != 12 || got[11].Seq != 12 {
		t.Fatalf("after torn write: %d lines, err %v", len(got), err)
	}
}

func TestEpochsAreSeparateLogs(t *testing.T) {
	s := open(t, 0)
	first, second := ref, ref
	second.Epoch = 2
	s.Append(first, lines(1, 3))
	if n, _ := s.Append(second, lines(1, 2)); n != 2 {
		t.Fatalf("a requeued attempt's lines were taken for duplicates: stored %d", n)
	}
	if steps, _ := s.Steps("run1", "job1", 2); len(steps) != 1 || steps[0] != 0 {
		t.Fatalf("steps of epoch 2: %v", steps)
	}
}

func TestEvictionKeepsCorrectness(t *testing.T) {
	s := open(t, 2)
	for round := uint64(0); round < 3; round++ {
		for step := -1; step < 5; step++ {
			r := ref
			r.Step = step
			from := round*10 + 1
			if n, err := s.Append(r, lines(from, from+9)); err != nil || n != 10 {
				t.Fatalf("step %d round %d: %d, %v", step, round, n, err)
			}
			// Replays across evictions are still recognised.
			if n, _ := s.Append(r, lines(1, from+9)); n != 0 {
				t.Fatalf("step %d round %d: replay stored %d", step, round, n)
			}
		}
	}
	if steps, _ := s.Steps("run1", "job1", 1); len(steps) != 6 || steps[0] != -1 {
		t.Fatalf("steps: %v", steps)
	}
}

func TestBadReferencesAreRefused(t *testing.T) {
	s := open(t, 0)
	for _, r := range []Ref{
		{RunID: "..", JobID: "j", Epoch: 1},
		{RunID: "r", JobID: "../../etc", Epoch: 1},
		{RunID: "r/x", JobID: "j", Epoch: 1},
		{RunID: "r", JobID: "j", Epoch: 0},
		{RunID: "r", JobID: "j", Epoch: 1, Step: -2},
	} {
		if _, err := s.Append(r, lines(1, 1)); err == nil {
			t.Errorf("%+v: accepted", r)
		}
	}
}

// Proves B84 (docs/behaviours.md).
func TestFollowDeliversAndDropsSlowViewers(t *testing.T) {
	s := open(t, 0)
	fast := s.Subscribe("job1", 100)
	slow := s.Subscribe("job1", 1)
	defer fast.Close()
	for i := uint64(0); i < 5; i++ {
		s.Append(ref, lines(i*2+1, i*2+2))
	}
	var seen []uint64
	timeout := time.After(5 * time.Second)
	for len(seen) < 10 {
		select {
		case ev := <-fast.C:
			for _, l := range ev.Lines {
				seen = append(seen, l.Seq)
			}
		case <-timeout:
			t.Fatalf("fast viewer saw only %v", seen)
		}
	}
	for i, seq := range seen {
		if seq != uint64(i+1) {
			t.Fatalf("out of order: %v", seen)
		}
	}
	// The slow viewer held one batch, then was cut off instead of blocking.
	n := 0
	for range slow.C {
		n++
	}
	if n != 1 || !slow.Lagged() {
		t.Fatalf("slow viewer got %d batches, lagged=%v", n, slow.Lagged())
	}
	if fast.Lagged() {
		t.Fatal("fast viewer marked lagged")
	}
}

func TestLineEncodingIsJSON(t *testing.T) {
	texts := []string{"plain", `quote " and \ backslash`, "tab\tnew\nline\r", "\x00\x1f\x7f", "bad utf8 \xff\xfe end", "ünïcödé ✓ 🚀", strings.Repeat("x", 70000)}
	for _, text := range texts {
		l := Line{Seq: 42, Stream: "stderr", Text: text, TimeMS: -5}
		b := appendLine(nil, &l)
		var std Line
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("%q: not JSON: %v (%s)", text, err, b)
		}
		want := perByteValid(text)
		if std.Text != want || std.Seq != 42 || std.Stream != "stderr" || std.TimeMS != -5 {
			t.Fatalf("%q: round trip gave %+v", text, std)
		}
	}
}

func FuzzLineEncoding(f *testing.F) {
	f.Add("hello", uint64(1))
	f.Add("\xff\"\\\n\u2028", uint64(99))
	f.Fuzz(func(t *testing.T, text string, seq uint64) {
		b := appendLine(nil, &Line{Seq: seq, Stream: "stdout", Text: text})
		if _, ok := readLine(string(b[:len(b)-1])); !ok {
			t.Fatalf("%q: a stored line missed the fast road", b)
		}
		l, err := decodeLine(b[:len(b)-1])
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if l.Seq != seq || l.Text != perByteValid(text) {
			t.Fatalf("%q: got %q", text, l.Text)
		}
	})
}

// FuzzStoredLineFastRoad: any line decodeLine reads by hand, the full
// decoder reads the same way.
func FuzzStoredLineFastRoad(f *testing.F) {
	f.Add(`{"seq":1,"stream":"stdout","text":"a\u001b[0m\"","time_ms":5}`)
	f.Add(`{"time_ms":-1,"text":"é\/","seq":18446744073709551615}`)
	f.Add(`{"seq":1,"seq":2}`)
	f.Add(`{"seq":1,"Text":"x"}`)
	f.Fuzz(func(t *testing.T, s string) {
		l, ok := readLine(s)
		if !ok {
			return
		}
		var want Line
		if err := gojson.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("%q: read by hand as %+v, refused by the decoder: %v", s, l, err)
		}
		if l != want {
			t.Fatalf("%q: by hand %+v, decoder %+v", s, l, want)
		}
	})
}

// BenchmarkAppend50 stores batches of 50 100-byte lines, the agent's default
// batch; it reports lines per second into the store.
func BenchmarkAppend50(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := make([]Line, 50)
	text := strings.Repeat("a", 100)
	var seq uint64
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i] = Line{Seq: seq, Stream: "stdout", Text: text, TimeMS: 1}
		}
		if _, err := s.Append(ref, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "lines/s")
}

// perByteValid replaces each invalid byte with U+FFFD, as encoding/json does.
func perByteValid(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
