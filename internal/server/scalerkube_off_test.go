//go:build !kubernetes

package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A kiln built without the kubernetes tag refuses a kubernetes scaler at
// start (its configuration is checked before anything starts), saying the
// binary was built without the backend and how to build one with it.
// Proves B254 (docs/behaviours.md).
func TestKubernetesScalerRefusedWithoutTheBuildTag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kiln.yml")
	body := "scalers:\n  - name: pods\n    type: kubernetes\n    labels: [k8s]\n    max_agents: 2\n    image: registry.example/kiln-agent:1\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if err := c.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	for _, want := range []string{"scalers[0] (pods).type: this kiln was built without the kubernetes backend", "go build -tags kubernetes ./cmd/kiln"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate: %v, want %q", err, want)
		}
	}
}
