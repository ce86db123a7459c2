package proto

import (
	"bytes"
	"testing"

	gojson "github.com/goccy/go-json"
)

// The frame EncodeDispatch assembles from an encoded spec is the one Encode
// makes of the same message, byte for byte, for specs with and without a
// checkout and with text JSON escapes (HTML characters, control and
// non-ASCII characters, U+2028).
func TestEncodeDispatchIsEncode(t *testing.T) {
	tricky := "a <b> & \"c\"\n\t\u2028 é \x01"
	specs := []JobSpec{
		{Name: "build", Workflow: "ci", Steps: []Step{{Name: "s", Run: "echo hi"}}},
		{Name: tricky, Workflow: "ci", WorkflowEnv: map[string]string{"B": "2", "A": tricky}, JobEnv: map[string]string{"X": "1"},
			Steps:    []Step{{Name: "s", Run: "make", Env: map[string]string{"Z": "${{ matrix.go }}"}, Retry: &Retry{MaxAttempts: 3, DelayMS: 10}}},
			Contexts: map[string]any{"event": map[string]any{"ref": "refs/heads/main", "n": 1.5, "list": []any{true, nil, "x"}}, "run": map[string]any{"number": float64(7)}},
			Secrets:  map[string]string{"TOKEN": "s3cret"}, TimeoutMS: 60000},
		{},
	}
	checkouts := []*Checkout{
		nil,
		{URL: "https://github.com/acme/app.git", Ref: "refs/heads/main", SHA: "abc"},
		{URL: "https://x", SHA: "abc", Auth: &GitAuth{Username: "x-access-token", Password: tricky}},
		{LocalPath: "/home/ada/src/app"},
	}
	for _, spec := range specs {
		for _, co := range checkouts {
			stored, err := gojson.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			d := &Dispatch{JobID: "0198-job", RunID: "0198-run", LeaseEpoch: 3, Attempt: 2}
			got, err := EncodeDispatch(d, stored, co)
			if err != nil {
				t.Fatal(err)
			}
			full := *d
			full.Spec = spec
			full.Spec.Checkout = co
			want, err := Encode(0, &full)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("EncodeDispatch:\n%s\nEncode:\n%s", got, want)
			}
			if _, m, err := Decode(got); err != nil || m.(*Dispatch).Spec.Checkout == nil != (co == nil) {
				t.Fatalf("decode %s: %v", got, err)
			}
		}
	}
}

func TestEncodeDispatchRefusesWhatIsNotAnObject(t *testing.T) {
	for _, spec := range []string{"", "null", "[]", "{", `"x"`} {
		if _, err := EncodeDispatch(&Dispatch{JobID: "j"}, []byte(spec), nil); err == nil {
			t.Errorf("spec %q was accepted", spec)
		}
	}
}
