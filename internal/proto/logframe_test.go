package proto

import (
	"reflect"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"
)

// fullLogFrame decodes a log frame the slow way only.
func fullLogFrame(b []byte) (uint64, *Log, bool) {
	var f frame
	if gojson.Unmarshal(b, &f) != nil || f.Type != TypeLog {
		return 0, nil, false
	}
	m := &Log{}
	if gojson.Unmarshal(f.Data, m) != nil {
		return 0, nil, false
	}
	return f.Seq, m, true
}

func logFrameSeeds(t testing.TB) [][]byte {
	m := &Log{JobID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", LeaseEpoch: 3, Step: -1, Lines: []LogLine{
		{Seq: 1, Stream: StreamStdout, Text: "plain", TimeMS: 1764720000000},
		{Seq: 2, Stream: StreamStderr, Text: "\x1b[31mred\x1b[0m \"quoted\" \\ tab\there é ✓ 🙂", TimeMS: 1},
		{Seq: 3, Stream: StreamSystem, Text: "", TimeMS: -5},
	}}
	b, err := Encode(7, m)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{b,
		[]byte(`{"type":"log","seq":1,"data":{"job_id":"j","lease_epoch":1,"step":0,"lines":[]}}`),
		[]byte(`{"type":"log", "seq" : 2 , "data" : { "lines" : [ { "text" : "a\u00e9\/" , "seq" : 1 } ] , "job_id" : "j" } }`),
		[]byte(`{"type":"log","seq":1,"data":{"job_id":"j","lines":[{"text":"\ud83d\ude42"}]}}`),
		[]byte(`{"type":"log","seq":1,"data":{"job_id":"j","JOB_ID":"k"}}`),
		[]byte(`{"type":"log","seq":1.5,"data":{}}`),
		[]byte(`{"type":"log","seq":01,"data":{}}`),
		[]byte(`{"type":"log","seq":1,"data":{"step":-9223372036854775808,"lease_epoch":9223372036854775807}}`),
		[]byte(`{"type":"log","seq":1,"data":{"lines":[{"text":"` + "\xff" + `"}]}}`),
		[]byte(`{"type":"log","seq":1,"data":{"lines":[{"seq":1},{"seq":2}],"lines":[{"seq":3}]}}`),
	}
}

// TestLogFrameFastRoadMatchesTheDecoder: the frames the agent writes take
// the fast road, and every frame that takes it decodes as the full decoder
// would decode it.
func TestLogFrameFastRoadMatchesTheDecoder(t *testing.T) {
	seeds := logFrameSeeds(t)
	if _, _, ok := readLogFrame(seeds[0]); !ok {
		t.Fatalf("an encoded log frame missed the fast road: %s", seeds[0])
	}
	for _, b := range seeds {
		checkLogFrame(t, b)
	}
	// The frame Encode writes by hand is the message, to the full decoder.
	seq, m, ok := fullLogFrame(seeds[0])
	if !ok || seq != 7 || len(m.Lines) != 3 || m.Lines[1].Text != "\x1b[31mred\x1b[0m \"quoted\" \\ tab\there é ✓ 🙂" {
		t.Fatalf("the encoded frame decodes as %d %+v (%v)", seq, m, ok)
	}
	// A frame with a huge line still decodes the same (strings are shared).
	big := &Log{JobID: "j", LeaseEpoch: 1, Lines: []LogLine{{Seq: 1, Stream: StreamStdout, Text: strings.Repeat("é", 10000)}}}
	b, err := Encode(1, big)
	if err != nil {
		t.Fatal(err)
	}
	checkLogFrame(t, b)
}

func checkLogFrame(t *testing.T, b []byte) {
	t.Helper()
	seq, m, ok := readLogFrame(b)
	if !ok {
		return
	}
	wantSeq, want, wantOK := fullLogFrame(b)
	if !wantOK {
		t.Fatalf("the fast road read %q, which the full decoder refuses", b)
	}
	if seq != wantSeq || !reflect.DeepEqual(m, want) {
		t.Fatalf("%q: fast road %d %+v, full decoder %d %+v", b, seq, m, wantSeq, want)
	}
}

func FuzzDecodeLogFrame(f *testing.F) {
	for _, b := range logFrameSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(checkLogFrame)
}
