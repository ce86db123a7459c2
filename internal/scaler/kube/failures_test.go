//go:build kubernetes

package kube

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/kilnci/kiln/internal/scaler"
)

// failure is what the manager writes as the spawn's scaler.failed detail:
// the spawn's error, or — when the pod ran first — how its agent ended,
// with the captured output.
func failure(t *testing.T, b *Backend, c scaler.Config, req scaler.SpawnRequest) string {
	t.Helper()
	inst, err := spawn(t, b, c, req)
	if err != nil {
		return err.Error()
	}
	select {
	case <-inst.Exited():
	case <-time.After(time.Minute):
		t.Fatal("the agent neither failed its spawn nor exited")
	}
	_ = inst.Destroy(context.Background(), "spawn-failed")
	return scaler.WithTail("agent exited before it registered: "+inst.ExitErr().Error(), inst.Tail())
}

// A pod that cannot start fails its spawn with the kubelet's reason and
// message — an image it cannot pull (ImagePullBackOff, at once, not at the
// spawn timeout), an image without kiln (StartError) — or, still pending
// at the spawn timeout, with why (Unschedulable: insufficient cpu); an
// agent that exits after it started fails it with its exit code and the
// last lines of its output read from the pod's log; a namespace that does
// not exist fails it with the API's answer. No pod is left behind.
// Proves B163 (docs/behaviours.md).
func TestKubernetesSpawnFailuresCarryThePodsReason(t *testing.T) {
	f, b, c := setup(t)
	check := func(what, detail string, want ...string) {
		t.Helper()
		t.Logf("%s:\n%s", what, detail)
		for _, w := range want {
			if !strings.Contains(detail, w) {
				t.Errorf("%s: the failure %q lacks %q", what, detail, w)
			}
		}
		for ns, pods := range map[string]int{"kiln-ci": len(f.Pods("kiln-ci")), "default": len(f.Pods("default"))} {
			if pods != 0 {
				t.Errorf("%s: %d pods left in %s", what, pods, ns)
			}
		}
	}
	bad := c
	bad.Image = missingImage
	start := time.Now()
	check("an image the kubelet cannot pull", failure(t, b, bad, scaler.SpawnRequest{}),
		"cannot start", "container agent waiting: ImagePullBackOff: Back-off pulling image \"registry.example/missing:1\"")
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the pull failure took %s to surface", took)
	}
	bad.Image = noKilnImage
	check("an image without kiln", failure(t, b, bad, scaler.SpawnRequest{}),
		"ended before its agent ran", "exited with code 128 (StartError)", `exec: "kiln": executable file not found in $PATH`)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := b.Spawn(ctx, scaler.SpawnRequest{AgentID: "scaler-kubernetes-" + uuid.NewString()[:8], ServerURL: "http://127.0.0.1:9",
		Token: "kat_x", CPUs: 64, Scaler: c, Event: func(string, string) {}})
	if err == nil {
		t.Fatal("a pod asking for 64 CPUs of a 4-CPU node started")
	}
	check("an unschedulable pod", err.Error(), "was not running within the spawn timeout",
		"not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu")

	check("an agent exiting at once", failure(t, b, c, scaler.SpawnRequest{ServerURL: "ftp://127.0.0.1:9"}),
		"exited with code ", "--- captured output (last 50 lines) ---", "must start with")

	bad = c
	bad.Namespace = "nope"
	check("a namespace that does not exist", failure(t, b, bad, scaler.SpawnRequest{}), `creating pod nope/kiln-scaler-kubernetes-`, `namespaces "nope" not found`)
}

// At start a server deletes its own pods no spawn row knows (Sweep), and
// Reap deletes one by agent id; another server's pods (another instance
// label) are never touched.
// Proves B164 (docs/behaviours.md).
func TestKubernetesSweepDeletesOnlyThisServersUnknownPods(t *testing.T) {
	f, mine, c := setup(t)
	other := &Backend{Instance: "test-other-" + uuid.NewString()[:8], Scalers: mine.Scalers, GracePeriod: time.Second}
	var insts []scaler.Instance
	for _, s := range []struct {
		b  *Backend
		id string
	}{{mine, "scaler-kubernetes-known001"}, {mine, "scaler-kubernetes-orphan01"}, {mine, "scaler-kubernetes-reaped01"}, {other, "scaler-kubernetes-others01"}} {
		inst, err := spawn(t, s.b, c, scaler.SpawnRequest{AgentID: s.id})
		if err != nil {
			t.Fatalf("spawn %s: %v", s.id, err)
		}
		insts = append(insts, inst)
	}
	defer func() {
		for _, inst := range insts {
			_ = inst.Destroy(context.Background(), "shutdown")
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mine.Sweep(ctx, func(id string) bool { return id != "scaler-kubernetes-orphan01" }); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if err := mine.Reap(ctx, "scaler-kubernetes-reaped01"); err != nil {
		t.Fatalf("reap: %v", err)
	}
	// A deleted pod is gone once its agent has ended (SIGTERM): its
	// instance sees it go.
	for i, inst := range insts[1:3] {
		select {
		case <-inst.Exited():
		case <-ctx.Done():
			t.Fatalf("pod %d is still there after the sweep and the reap", i+1)
		}
	}
	left := f.Pods("kiln-ci")
	if len(left) != 2 || left["kiln-scaler-kubernetes-known001"] == nil || left["kiln-scaler-kubernetes-others01"] == nil {
		t.Fatalf("pods after the sweep and the reap: %v, want the known one and the other server's", len(left))
	}
}

// A pod_template is read from a file or inline, as a Pod or a bare
// PodSpec, strictly: an unknown field is refused naming it, and another
// kind is refused. At start, a kubernetes scaler whose template cannot be
// read, whose agent container would have no image, or whose kubeconfig
// cannot be loaded, or whose pods could not reach server_url (none, or
// loopback without hostNetwork), is refused naming the key.
// Proves B165 (docs/behaviours.md).
func TestKubernetesTemplateAndConfigRefusals(t *testing.T) {
	spec, err := LoadTemplate("containers:\n  - name: agent\n    image: x:1\nnodeSelector: {pool: ci}\n")
	if err != nil || spec.Spec.NodeSelector["pool"] != "ci" || spec.Spec.Containers[0].Image != "x:1" {
		t.Fatalf("an inline PodSpec: %+v, %v", spec, err)
	}
	if _, err := LoadTemplate("{spec: {containers: [{name: agent, image: x}]}}"); err != nil {
		t.Fatalf("an inline Pod on one line: %v", err)
	}
	for _, tc := range []struct{ template, want string }{
		{"containers:\n  - name: agent\n    imag: x:1\n", `unknown field "containers[0].imag"`},
		{"apiVersion: apps/v1\nkind: Deployment\nspec: {}\n", "a apps/v1 Deployment is not a v1 Pod"},
		{filepath.Join(t.TempDir(), "missing.yaml"), "no such file or directory"},
	} {
		if _, err := LoadTemplate(tc.template); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("template %q: %v, want %q", tc.template, err, tc.want)
		}
	}
	f := newFakeCluster(t)
	b := &Backend{Instance: "test"}
	good := scaler.Config{Name: "pods", Type: "kubernetes", Image: agentImage, Kubeconfig: f.Kubeconfig(t), ServerURL: "https://kiln.example:4000"}
	if err := b.CheckConfig(good); err != nil {
		t.Fatalf("a good scaler: %v", err)
	}
	for _, u := range []string{"", "http://127.0.0.1:4000", "http://localhost:4000"} {
		bad := good
		bad.ServerURL = u
		if err := b.CheckConfig(bad); err == nil || !strings.Contains(err.Error(), "scalers (pods).server_url: ") {
			t.Errorf("server_url %q: %v", u, err)
		}
		bad.PodTemplate = "{hostNetwork: true}"
		if err := b.CheckConfig(bad); err != nil && u != "" {
			t.Errorf("server_url %q with hostNetwork: %v", u, err)
		}
	}
	bad := good
	bad.PodTemplate = "containers:\n  - name: agent\n    imag: x:1\n"
	if err := b.CheckConfig(bad); err == nil || !strings.Contains(err.Error(), "scalers (pods).pod_template: ") {
		t.Errorf("a bad template: %v", err)
	}
	bad = good
	bad.Image, bad.PodTemplate = "", "{containers: [{name: agent}]}"
	if err := b.CheckConfig(bad); err == nil || !strings.Contains(err.Error(), "agent container has no image and the scaler sets none (image)") {
		t.Errorf("no image: %v", err)
	}
	bad = good
	bad.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := b.CheckConfig(bad); err == nil || !strings.Contains(err.Error(), "scalers (pods).kubeconfig: ") {
		t.Errorf("a missing kubeconfig: %v", err)
	}
	garbled := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(garbled, []byte("clusters: 12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad.Kubeconfig = garbled
	if err := b.CheckConfig(bad); err == nil || !strings.Contains(err.Error(), "scalers (pods).kubeconfig: ") {
		t.Errorf("a garbled kubeconfig: %v", err)
	}
}
