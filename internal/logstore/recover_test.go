package logstore

import (
	"bytes"

	"os"
	"path/filepath"
	"strings"
	"testing"
)

// storeWithTail appends lines 1..n to a fresh store, closes it, appends
// tail to the step's file as a crash or a bad disk would leave it, and
// reopens the store.
func storeWithTail(t *testing.T, n int, tail []byte) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		if _, err := s.Append(ref, lines(1, uint64(n))); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	p := filepath.Join(dir, "run1", "job1", "e1", "0.jsonl")
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(tail)
	f.Close()
	s, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, p
}

// checkRecovered: the n acknowledged lines are all there, in order, the
// store's high-water mark is n (or a good line the tail held past it), and
// the replay of the next lines is stored after them and read back.
func checkRecovered(t *testing.T, s *Store, n int) {
	t.Helper()
	last, err := s.LastSeq(ref)
	if err != nil || last < uint64(n) {
		t.Fatalf("after recovery the last seq is %d (%v); %d lines were acknowledged", last, err, n)
	}
	got, err := s.Read(ref, 0, max(n, 1))
	if err != nil || len(got) != n && !(n == 0 && last > 0) {
		t.Fatalf("read back %d of %d acknowledged lines: %v", len(got), n, err)
	}
	for i, l := range got[:n] {
		if l.Seq != uint64(i+1) {
			t.Fatalf("line %d has seq %d", i+1, l.Seq)
		}
	}
	if last != uint64(n) {
		return // the tail held a good line past n: kept as stored
	}
	if stored, err := s.Append(ref, lines(1, uint64(n+3))); err != nil || stored != 3 {
		t.Fatalf("the replay after recovery stored %d lines: %v", stored, err)
	}
	all, err := s.Read(ref, 0, n+10)
	if err != nil || len(all) != n+3 || all[n+2].Seq != uint64(n+3) {
		t.Fatalf("after the replay %d lines: %v", len(all), err)
	}
}

// A step's log file whose tail is torn or garbled — a partial line, junk
// with newlines, NUL bytes a crashed file system left, a line that decodes
// but goes back in seq (it would make every later line look like a
// replay) — opens again cut after its last good line: every acknowledged
// line is kept and the agent's replay is stored after it.
//
// B138.
func TestGarbledTailRecoversToTheLastGoodLine(t *testing.T) {
	for name, tail := range map[string]string{
		"torn line":         `{"seq":11,"stream":"stdout","te`,
		"junk lines":        "\x00\x00garbage\nmore}{\n",
		"nul page":          strings.Repeat("\x00", 4096),
		"nul page with eol": strings.Repeat("\x00", 100) + "\n",
		"seq going back":    `{"seq":3,"stream":"stdout","text":"x","time_ms":1}` + "\n",
		"good after junk":   "junk\n" + `{"seq":11,"stream":"stdout","text":"x","time_ms":1}` + "\n",
		"repeated seq":      `{"seq":10,"stream":"stdout","text":"x","time_ms":1}` + "\n",
		"json not a line":   "[1,2]\n",
		"only a newline":    "\n",
		"half a utf8 rune":  `{"seq":11,"stream":"stdout","text":"` + "\xe2\x82" + "\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := storeWithTail(t, 10, []byte(tail))
			checkRecovered(t, s, 10)
		})
	}
	// A file with nothing good at all is emptied, and takes lines again.
	s, p := storeWithTail(t, 0, []byte("garbage\n\x00"))
	if last, err := s.LastSeq(ref); err != nil || last != 0 {
		t.Fatalf("an all-garbage file: %d %v", last, err)
	}
	checkRecovered(t, s, 0)
	if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("garbage")) {
		t.Fatalf("the garbage stayed: %q", b)
	}
}

// Whatever bytes follow the acknowledged lines of a step's log file, it
// opens again with those lines kept, in order, and takes the replay.
//
// B138.
func FuzzTailRecovery(f *testing.F) {
	f.Add(uint8(10), []byte(`{"seq":11,"stream":"stdout","te`))
	f.Add(uint8(3), []byte("junk\n{\"seq\":2}\n"))
	f.Add(uint8(1), []byte(`{"seq":2,"stream":"stdout","text":"ok","time_ms":5}`+"\n\x00\x00"))
	f.Add(uint8(0), []byte("\n\n\n"))
	f.Fuzz(func(t *testing.T, n uint8, tail []byte) {
		if len(tail) > 64<<10 {
			return
		}
		s, _ := storeWithTail(t, int(n%50), tail)
		checkRecovered(t, s, int(n%50))
	})
}
