package bench

import (
	"reflect"
	"testing"

	"github.com/kilnci/kiln/internal/proto"
)

// The scripted agents read only a frame's envelope and the fields they act
// on; what they read must be what the server sent, and a frame that does
// not decode, or a dispatch without its job, ends the agent.
func TestDecodeServerFrame(t *testing.T) {
	f, err := proto.EncodeDispatch(&proto.Dispatch{JobID: "j1", RunID: "r1", LeaseEpoch: 3, Attempt: 2},
		[]byte(`{"name":"build","steps":[{"run":"echo {\"x\": [1]}"}],"contexts":{"event":{"a":{"b":[1,2]}}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeServerFrame(f)
	if err != nil || !reflect.DeepEqual(m, &proto.Dispatch{JobID: "j1", RunID: "r1", LeaseEpoch: 3, Attempt: 2}) {
		t.Fatalf("dispatch: %#v, %v", m, err)
	}
	for frame, want := range map[string]proto.Message{
		`{"type":"ack","data":{"seq":41}}`:                      &proto.Ack{Seq: 41},
		`{"type":"error","data":{"code":"x","message":"why"}}`:  &proto.Error{Code: "x", Message: "why"},
		`{"type":"coordinators","data":{"coordinators":["u"]}}`: nil,
	} {
		m, err := decodeServerFrame([]byte(frame))
		if err != nil || !reflect.DeepEqual(m, want) {
			t.Errorf("%s: %#v, %v; want %#v", frame, m, err, want)
		}
	}
	for _, bad := range []string{`not json`, `{"type":"job.dispatch","data":{"lease_epoch":1}}`, `{"type":"job.dispatch","data":{"job_id":"j"}}`} {
		if m, err := decodeServerFrame([]byte(bad)); err == nil {
			t.Errorf("%s: decoded as %#v", bad, m)
		}
	}
}
