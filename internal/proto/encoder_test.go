package proto

import (
	"reflect"
	"strings"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln"
)

// An Encoder's frames decode to what Encode's do, for every message type,
// with one encoder reused across them (a frame left in its buffer must not
// leak into the next), and it refuses what Encode refuses.
func TestEncoderMatchesEncode(t *testing.T) {
	msgs := append(validMessages(),
		&Log{JobID: "j", LeaseEpoch: 2, Step: 1, Lines: []LogLine{
			{Seq: 1, Stream: StreamStdout, Text: `<b>"quoted" & \ tab	` + "\x01", TimeMS: 5},
			{Seq: 2, Stream: StreamSystem, Text: "ünïcode ✓", TimeMS: 6},
		}},
		&Error{Code: ErrInvalidMessage, Message: `<script>"x" & y</script>`})
	enc := NewEncoder()
	for i, m := range msgs {
		var seq uint64
		if Durable(m.Type()) {
			seq = uint64(100 + i)
		}
		b, err := enc.Encode(seq, m)
		if err != nil {
			t.Fatalf("%s: %v", m.Type(), err)
		}
		gotSeq, got, err := Decode(b)
		if err != nil || gotSeq != seq {
			t.Fatalf("%s: decode %s: seq %d, %v", m.Type(), b, gotSeq, err)
		}
		want, err := Encode(seq, m)
		if err != nil {
			t.Fatalf("%s: Encode: %v", m.Type(), err)
		}
		_, wantMsg, _ := Decode(want)
		if !reflect.DeepEqual(got, wantMsg) {
			t.Fatalf("%s: %+v, want %+v", m.Type(), got, wantMsg)
		}
	}
	if _, err := enc.Encode(0, &JobStatus{JobID: "j", LeaseEpoch: 1, Status: kiln.JobSuccess, Time: time.Now()}); err == nil {
		t.Error("a durable message without seq was encoded")
	}
	if _, err := enc.Encode(3, &Heartbeat{}); err == nil {
		t.Error("a heartbeat with a seq was encoded")
	}
	big := &Log{JobID: "j", LeaseEpoch: 1, Step: 0, Lines: []LogLine{{Seq: 1, Stream: "stdout", Text: strings.Repeat("x", MaxFrameBytes)}}}
	if _, err := enc.Encode(1, big); err == nil {
		t.Fatal("an oversized frame was encoded")
	}
	bigErr := &Error{Code: ErrInvalidMessage, Message: strings.Repeat("x", MaxFrameBytes)}
	if _, err := enc.Encode(0, bigErr); err == nil {
		t.Fatal("an oversized frame was encoded")
	}
}

// Encode writes the envelope by hand; its frames are byte for byte what
// marshalling the envelope struct around the marshalled data gave.
func TestEncodeEnvelopeIsMarshalled(t *testing.T) {
	for _, m := range append(validMessages(), &Drain{}, &Error{Code: ErrInvalidMessage, Message: "<b> & </b>"}) {
		if _, ok := m.(*Log); ok {
			continue // written by hand since before (logframe_test.go)
		}
		var seq uint64
		if Durable(m.Type()) {
			seq = 12
		}
		data, err := gojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := gojson.Marshal(frame{Type: m.Type(), Seq: seq, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(seq, m)
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %s, %v; want %s", m.Type(), got, err, want)
		}
	}
}
