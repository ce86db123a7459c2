package logstore

import (
	"strings"
	"testing"
)

// A step attempt's log stops at the cap with one marker line in place of
// the first line over it; later lines, and a replay, store nothing; the
// cap survives the file being closed and reopened (a restart); system
// lines have their own small allowance, so an honest executor's notices
// and truncation line always get through.
//
// B104: the server enforces the per-step log cap.
func TestAppendStopsAtTheStepCapWithAMarker(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, MaxStepBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("o", 1023) // 1 KiB a line with its newline
	batch := func(from, n uint64, stream string) []Line {
		out := make([]Line, n)
		for i := range out {
			out[i] = Line{Seq: from + uint64(i), Stream: stream, Text: text, TimeMS: 1}
		}
		return out
	}
	// 1,000 lines fit (1,000 KiB ≤ 1 MiB); 100 system lines do not count.
	if n, err := s.Append(ref, batch(1, 1000, "stdout")); err != nil || n != 1000 {
		t.Fatalf("under the cap: %d %v", n, err)
	}
	if n, _ := s.Append(ref, batch(1001, 100, "system")); n != 100 {
		t.Fatalf("system lines: stored %d, want 100", n)
	}
	// 24 more fit exactly; the 25th becomes the marker.
	if n, _ := s.Append(ref, batch(1101, 50, "stderr")); n != 25 {
		t.Fatalf("across the cap: stored %d, want 24 and the marker", n)
	}
	if n, _ := s.Append(ref, batch(1151, 10, "stdout")); n != 0 {
		t.Fatalf("after the cap: stored %d", n)
	}
	s.Close()

	s, err = Open(Config{Dir: dir, MaxStepBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, _ := s.Append(ref, batch(1161, 1, "system")); n != 0 {
		t.Fatalf("after a restart: stored %d", n)
	}
	got, err := s.Read(ref, 1100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1]
	if len(got) != 25 || last.Seq != 1125 || last.Stream != "system" || !strings.HasPrefix(last.Text, TruncatedByServer) {
		t.Fatalf("read %d lines after 1100, ending %+v", len(got), last)
	}
	if seq, _ := s.LastSeq(ref); seq != 1161 {
		t.Fatalf("LastSeq %d: lines dropped over the cap count as handled", seq)
	}

	// A fresh attempt under a budget reopened mid-way keeps counting.
	other := Ref{RunID: "run1", JobID: "job1", Epoch: 2, Step: 0}
	if n, _ := s.Append(other, batch(1, 600, "stdout")); n != 600 {
		t.Fatalf("second attempt: %d", n)
	}
	s.CloseStep(other)
	if n, _ := s.Append(other, batch(601, 600, "stdout")); n != 425 {
		t.Fatalf("second attempt after reopening: stored %d, want 424 and the marker", n)
	}
}
