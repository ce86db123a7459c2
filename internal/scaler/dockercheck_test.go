package scaler_test

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/scaler"
)

// A docker scaler whose containers could not reach server_url is refused
// at start, naming the key: on a network other than the host's, a
// loopback or missing server_url; any network is fine with a reachable
// address; host networking (the default) reaches loopback.
// Proves B186 (docs/behaviours.md).
func TestDockerCheckRefusesUnreachableServerURL(t *testing.T) {
	d := &scaler.Docker{}
	for _, tc := range []struct {
		network, url, want string
	}{
		{"", "http://127.0.0.1:4000", ""},
		{"host", "", ""},
		{"bridge", "http://127.0.0.1:4000", "scalers (b).server_url: \"http://127.0.0.1:4000\" is the host's loopback"},
		{"bridge", "http://localhost:4000", "scalers (b).server_url:"},
		{"bridge", "http://[::1]:4000", "scalers (b).server_url:"},
		{"bridge", "http://0.0.0.0:4000", "scalers (b).server_url:"},
		{"ci-net", "", "scalers (b).server_url: a docker scaler on network \"ci-net\" needs a server_url"},
		{"none", "http://10.0.0.5:4000", "scalers (b).network:"},
		{"bridge", "http://172.17.0.1:4000", ""},
		{"ci-net", "https://kiln.internal", ""},
	} {
		err := d.CheckConfig(scaler.Config{Name: "b", Type: "docker", Network: tc.network, ServerURL: tc.url})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("network %q url %q: refused: %v", tc.network, tc.url, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("network %q url %q: error %v, want %q…", tc.network, tc.url, err, tc.want)
		}
	}
}

// The manager refuses the configuration at start with the key.
// Proves B186 (docs/behaviours.md).
func TestManagerRefusesDockerScalerThatCannotReachTheServer(t *testing.T) {
	_, err := scaler.NewManager(nil, scaler.ManagerConfig{Instance: "i", Backends: map[string]scaler.Backend{"docker": &scaler.Docker{}},
		Scalers: []scaler.Config{{Name: "boxes", Type: "docker", Image: "kiln-agent:latest", Labels: []string{"box"}, MaxAgents: 1,
			Network: "bridge", ServerURL: "http://127.0.0.1:4000"}}})
	if err == nil || !strings.Contains(err.Error(), "scalers (boxes).server_url") {
		t.Fatalf("error %v", err)
	}
}
