package agent

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
)

func TestFrameEncoderMatchesProto(t *testing.T) {
	code := 3
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	msgs := []proto.Message{
		&proto.Log{JobID: "j", LeaseEpoch: 2, Step: 1, Lines: []proto.LogLine{
			{Seq: 1, Stream: proto.StreamStdout, Text: `<b>"quoted" & \ tab	` + "\x01", TimeMS: 5},
			{Seq: 2, Stream: proto.StreamSystem, Text: "ünïcode ✓", TimeMS: 6},
		}},
		&proto.StepStatus{JobID: "j", LeaseEpoch: 2, Index: -1, Name: "checkout", Status: kiln.StepFailed, ExitCode: &code, StartedAt: &at},
		&proto.JobStatus{JobID: "j", LeaseEpoch: 2, Status: kiln.JobSuccess, Outputs: map[string]string{"a": "b"}, Time: at},
	}
	enc := newFrameEncoder()
	for i, m := range msgs {
		b, err := enc.encode(uint64(100+i), m)
		if err != nil {
			t.Fatal(err)
		}
		seq, got, err := proto.Decode(b)
		if err != nil || seq != uint64(100+i) {
			t.Fatalf("%s: decode %q: seq %d, %v", m.Type(), b, seq, err)
		}
		want, _ := proto.Encode(uint64(100+i), m)
		_, wantMsg, _ := proto.Decode(want)
		if !reflect.DeepEqual(got, wantMsg) {
			t.Fatalf("%s: %+v, want %+v", m.Type(), got, wantMsg)
		}
	}
	big := &proto.Log{JobID: "j", LeaseEpoch: 1, Step: 0, Lines: []proto.LogLine{{Seq: 1, Stream: "stdout", Text: strings.Repeat("x", proto.MaxFrameBytes)}}}
	if _, err := enc.encode(1, big); err == nil {
		t.Fatal("an oversized frame was encoded")
	}
}
