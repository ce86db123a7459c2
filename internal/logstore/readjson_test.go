package logstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"
)

// ReadJSON hands over the same lines as Read, each as a JSON object in
// appendLine's shape — stored lines as they are, a line in another shape
// (a file written by hand) encoded again — and honours after and limit
// the same way.
func TestReadJSONMatchesRead(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	texts := []string{"plain", "", `quote " and \ back`, "tab\tand\x1b[31mcolour", "é ✓ 🙂 \u2028", strings.Repeat("long ", 2000)}
	// Enough lines, and one long enough, to cross scanRaw's chunks.
	texts = append(texts, strings.Repeat("very long ", 20000))
	for i := range 1500 {
		texts = append(texts, fmt.Sprintf("line %d", i))
	}
	var in []Line
	for i, text := range texts {
		in = append(in, Line{Seq: uint64(i + 1), Stream: []string{"stdout", "stderr"}[i%2], Text: text, TimeMS: int64(i) - 1})
	}
	if _, err := s.Append(ref, in); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Lines written by hand, in other spellings, after the stored ones.
	f, err := os.OpenFile(filepath.Join(dir, "run1", "job1", "e1", "0.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(len(in))
	hand := fmt.Sprintf(`{"time_ms":3,"text":"by hand","stream":"stdout","seq":%d}`, n+1) + "\n" +
		fmt.Sprintf(`{ "seq": %d, "stream": "stdout", "text": "spaced", "time_ms": 4 }`, n+2) + "\n" +
		fmt.Sprintf(`{"seq":%d,"stream":"stdout","text":"\u00e9scaped","time_ms":5}`, n+3) + "\n" +
		fmt.Sprintf(`{"seq":%d,"stream":"stdout","text":"torn`, n+4) // a line still being written
	if _, err := f.WriteString(hand); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if s, err = Open(Config{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		after uint64
		limit int
	}{{0, 10000}, {0, 3}, {2, 1000}, {6, 2}, {n, 10}, {n + 3, 10}} {
		want, err := s.Read(ref, c.after, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ReadJSON(ref, c.after, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("after %d limit %d: %d lines, Read gave %d", c.after, c.limit, len(got), len(want))
		}
		for i, g := range got {
			var l Line
			if err := gojson.Unmarshal(g.JSON, &l); err != nil || g.Seq != want[i].Seq || l != want[i] {
				t.Errorf("after %d: line %d is %d %s (%v), want %+v", c.after, i, g.Seq, g.JSON, err, want[i])
			}
			// What the store wrote goes out byte for byte; the line
			// spelt with the keys out of order is written again.
			encoded := appendLine(nil, &want[i])
			if (g.Seq <= n || g.Seq == n+1) && !bytes.Equal(g.JSON, encoded[:len(encoded)-1]) {
				t.Errorf("after %d: line %d is %s, want %s", c.after, i, g.JSON, encoded)
			}
		}
	}
}

// FuzzStoredShape: every line appendLine writes is handed over as stored,
// with its seq; any other line that passes for one and decodes has the
// seq read from its head.
func FuzzStoredShape(f *testing.F) {
	f.Add(`{"seq":1,"stream":"stdout","text":"a","time_ms":5}`, "x", uint64(3), int64(-7))
	f.Add(`{"seq":01,"stream":"","time_ms":5}`, "\",\"time_ms\":", uint64(0), int64(0))
	f.Add(`{"seq":1,"stream":"","time_ms":}`, "", uint64(18446744073709551615), int64(-9223372036854775808))
	f.Fuzz(func(t *testing.T, line, text string, seq uint64, timeMS int64) {
		b := appendLine(nil, &Line{Seq: seq, Stream: "stdout", Text: text, TimeMS: timeMS})
		if got, ok := storedShape(b[:len(b)-1]); !ok || got != seq {
			t.Fatalf("%q: stored line read as %d, %v", b, got, ok)
		}
		got, ok := storedShape([]byte(line))
		if !ok {
			return
		}
		var l Line
		if gojson.Unmarshal([]byte(line), &l) == nil && l.Seq != got {
			t.Fatalf("%q: seq %d from its head, %d decoded", line, got, l.Seq)
		}
	})
}

// Lines that only look stored are decoded, never passed on: a seq JSON does
// not allow, another key first, or a tail that is not the time.
func TestStoredShapeRefusesOtherSpellings(t *testing.T) {
	for _, s := range []string{
		`{"seq":01,"stream":"stdout","text":"","time_ms":1}`,
		`{"seq":+1,"stream":"stdout","text":"","time_ms":1}`,
		`{"seq":,"stream":"stdout","text":"","time_ms":1}`,
		`{"seq":1,"text":"","stream":"stdout","time_ms":1}`,
		`{"seq":1,"stream":"stdout","time_ms":1,"text":""}`,
		`{"seq":1,"stream":"stdout","text":"","time_ms":}`,
		`{"seq":1,"stream":"","time_ms":1}x`,
	} {
		if seq, ok := storedShape([]byte(s)); ok {
			t.Errorf("%s passed as stored, seq %d", s, seq)
		}
	}
	if seq, ok := storedShape([]byte(`{"seq":10,"stream":"stdout","text":"","time_ms":-1}`)); !ok || seq != 10 {
		t.Errorf("a stored line: %d, %v", seq, ok)
	}
}
