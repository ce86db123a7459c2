package jobspec

import (
	"reflect"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln/internal/proto"
)

func sample() Job {
	return Job{
		Agent: proto.JobSpec{Name: "test (1.26)", Workflow: "ci", Steps: []proto.Step{{Name: "s", Run: "go test <./...>"}},
			Contexts: map[string]any{"event": map[string]any{"ref": "refs/heads/main"}}, TimeoutMS: 1000},
		Checkout: &Checkout{Source: "gh", Repository: "acme/app", URL: "https://github.com/acme/app.git", Ref: "refs/heads/main", SHA: "abc"},
		Release:  Plan{If: "success()", WorkflowEnv: []Var{{"A", "${{ run.number }}"}}, Needs: []string{"build"}, Workflow: "ci", Attempt: 2},
	}
}

func TestRoundTrip(t *testing.T) {
	j := sample()
	raw, err := j.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, j)
	}
}

// The fleet's view of a stored job is the same bytes the agent part encodes
// to on its own, and the same checkout: Sendable and Job agree.
func TestSendableIsTheAgentPartAsEncoded(t *testing.T) {
	j := sample()
	raw, err := j.Encode()
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSendable(raw)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := gojson.Marshal(j.Agent)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Agent) != string(agent) || !reflect.DeepEqual(s.Checkout, j.Checkout) {
		t.Fatalf("sendable %s %+v, want %s %+v", s.Agent, s.Checkout, agent, j.Checkout)
	}
}

func TestEncodeRefusesAStoredCheckout(t *testing.T) {
	j := sample()
	j.Agent.Checkout = &proto.Checkout{URL: "https://x", Auth: &proto.GitAuth{Password: "secret"}}
	if _, err := j.Encode(); err == nil {
		t.Fatal("a job with the agent's checkout (and its credentials) was encoded for the store")
	}
}

func TestDecodeSendableRefusesSpecsWithoutAnAgentPart(t *testing.T) {
	for _, raw := range []string{`{}`, `{"spec":{"name":"x"}}`, `{"agent":null}`, `not json`} {
		if _, err := DecodeSendable([]byte(raw)); err == nil {
			t.Errorf("%s was read as sendable", raw)
		}
	}
}
