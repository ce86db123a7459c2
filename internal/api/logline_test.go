package api

import (
	"strconv"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln/internal/jsonwire"
	"github.com/kilnci/kiln/internal/logstore"
)

// appendLogLine is the oracle of the server's lines: l as one NDJSON
// line, field by field, in LogLine's order.
func appendLogLine(b []byte, l *LogLine) []byte {
	b = appendLogLineHead(b, l)
	b = append(b, `"seq":`...)
	b = strconv.AppendUint(b, l.Seq, 10)
	b = append(b, `,"stream":`...)
	b = jsonwire.AppendString(b, l.Stream)
	b = append(b, `,"text":`...)
	b = jsonwire.AppendString(b, l.Text)
	b = append(b, `,"time_ms":`...)
	b = strconv.AppendInt(b, l.TimeMS, 10)
	return append(b, "}\n"...)
}

// checkLogLineFastRoad: a line the client reads by hand, the full decoder
// reads the same way.
func checkLogLineFastRoad(t *testing.T, s string) {
	t.Helper()
	l, ok := readLogLine(s)
	if !ok {
		return
	}
	var want LogLine
	if err := gojson.Unmarshal([]byte(s), &want); err != nil {
		t.Fatalf("%q: read by hand as %+v, refused by the decoder: %v", s, l, err)
	}
	if l != want {
		t.Fatalf("%q: by hand %+v, decoder %+v", s, l, want)
	}
}

// TestLogLineCodec: what the server writes by hand is the JSON of a
// LogLine, and the client reads it back by hand.
func TestLogLineCodec(t *testing.T) {
	for _, l := range []LogLine{
		{Job: "build", JobID: "0193a1b2", Attempt: 2, Step: -1, Seq: 1, Stream: "stdout", Text: "hello", TimeMS: 1764720000000},
		{Job: "test (linux, 1.26)", JobID: "x", Attempt: 1, Step: 3, StepName: "go test ./...", Seq: 18446744073709551615,
			Stream: "stderr", Text: "\x1b[31mFAIL\x1b[0m <a href=\"x\">&</a>\t\\ é ✓ 🙂 \u2028", TimeMS: -1},
		{Job: "j", Text: strings.Repeat("x", 70000)},
	} {
		b := appendLogLine(nil, &l)
		if !strings.HasSuffix(string(b), "}\n") || strings.Count(string(b), "\n") != 1 {
			t.Fatalf("not one NDJSON line: %q", b)
		}
		var std LogLine
		if err := gojson.Unmarshal(b, &std); err != nil || std != l {
			t.Fatalf("%q decodes as %+v (%v), want %+v", b, std, err, l)
		}
		got, ok := readLogLine(string(b[:len(b)-1]))
		if !ok || got != l {
			t.Fatalf("%q: the fast road read %+v (%v), want %+v", b, got, ok, l)
		}
		checkLogLineFastRoad(t, string(b[:len(b)-1]))
	}
	// Other spellings of the same line take the full decoder.
	for _, s := range []string{`{"JOB":"b"}`, `{"text":null}`, `{"text":"a","text":"b"}`, `{"seq":1,"extra":true}`, `{"text":"\ud83d\ude42"}`} {
		if _, ok := readLogLine(s); ok {
			t.Errorf("%s took the fast road", s)
		}
		if _, err := decodeLogLine([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// A line read back from the log store as stored JSON and written after its
// step attempt's head is byte for byte the line written field by field.
func TestStoredLogLineIsTheSameLine(t *testing.T) {
	logs, err := logstore.Open(logstore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	want := []LogLine{
		{Job: "build", JobID: "j1", Attempt: 2, Step: 0, Seq: 1, Stream: "stdout", Text: "hello", TimeMS: 1764720000000},
		{Job: "build", JobID: "j1", Attempt: 2, Step: 0, Seq: 2, Stream: "stderr",
			Text: "\x1b[31mFAIL\x1b[0m <a href=\"x\">&</a>\t\\ é ✓ 🙂 \u2028", TimeMS: -1},
		{Job: "build", JobID: "j1", Attempt: 2, Step: 0, Seq: 3, Stream: "stdout", Text: ""},
	}
	for _, named := range []string{"", "go test ./..."} {
		ref := logstore.Ref{RunID: "r1", JobID: "j1", Epoch: 2, Step: len(named) % 7}
		var stored []logstore.Line
		for _, l := range want {
			stored = append(stored, logstore.Line{Seq: l.Seq, Stream: l.Stream, Text: l.Text, TimeMS: l.TimeMS})
		}
		if _, err := logs.Append(ref, stored); err != nil {
			t.Fatal(err)
		}
		raw, err := logs.ReadJSON(ref, 0, 10)
		if err != nil || len(raw) != len(want) {
			t.Fatalf("read back %d lines, %v", len(raw), err)
		}
		for i, l := range want {
			l.Step, l.StepName = ref.Step, named
			head := appendLogLineHead(nil, &l)
			if got, line := appendStoredLogLine(nil, head, raw[i].JSON), appendLogLine(nil, &l); string(got) != string(line) {
				t.Errorf("stored:\n%s\nfield by field:\n%s", got, line)
			}
		}
	}
}
