//go:build kubernetes

package kube

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/scalertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started by client-go's import of klog.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}

var (
	buildOnce sync.Once
	kilnBin   string
	buildErr  error
)

// kiln builds the kiln binary once per test binary: the fake cluster's
// agent image runs it.
func kiln(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kiln-kube-bin-")
		if err != nil {
			buildErr = err
			return
		}
		kilnBin = filepath.Join(dir, "kiln")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "go", "build", "-o", kilnBin, "../../../cmd/kiln")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr, kilnBin = err, out.String()
		}
	})
	if buildErr != nil {
		t.Fatalf("build kiln: %v\n%s", buildErr, kilnBin)
	}
	return kilnBin
}

// Images of the fake cluster.
const (
	agentImage   = "registry.example/kiln-agent:1"
	noKilnImage  = "registry.example/busybox:1"
	missingImage = "registry.example/missing:1"
)

// setup is a fake cluster whose agent image runs kiln, and a kubernetes
// scaler on it through a kubeconfig (namespace kiln-ci).
func setup(t *testing.T) (*fakeCluster, *Backend, scaler.Config) {
	f := newFakeCluster(t)
	f.Images[agentImage] = kiln(t)
	f.Images[noKilnImage] = ""
	c := scaler.Config{Name: "pods", Type: "kubernetes", Kubeconfig: f.Kubeconfig(t), Image: agentImage}
	b := &Backend{Instance: "test-" + uuid.NewString()[:8], Scalers: []scaler.Config{c}, GracePeriod: 2 * time.Second}
	return f, b, c
}

// withConfig gives every spawn the scaler's configuration, as the manager
// does.
type withConfig struct {
	b scaler.Backend
	c scaler.Config
}

func (w withConfig) Spawn(ctx context.Context, req scaler.SpawnRequest) (scaler.Instance, error) {
	req.Scaler = w.c
	return w.b.Spawn(ctx, req)
}

// The kubernetes backend passes the conformance suite against a fake pods
// API (not a real cluster): a pod whose agent container runs `kiln agent`
// with the request's token (in its environment), id and labels, dialing
// the test's server, gone — deleted, not only stopped — once destroyed.
// Proves B161 (docs/behaviours.md).
func TestKubernetesBackendConformance(t *testing.T) {
	scalertest.Run(t, func(t *testing.T) scaler.Backend {
		f, b, c := setup(t)
		t.Cleanup(func() {
			if left := f.Pods("kiln-ci"); len(left) != 0 {
				t.Errorf("pods left after the suite: %v", slices.Collect(maps.Keys(left)))
			}
		})
		return withConfig{b, c}
	})
}

func spawn(t *testing.T, b *Backend, c scaler.Config, req scaler.SpawnRequest) (scaler.Instance, error) {
	t.Helper()
	if req.AgentID == "" {
		req.AgentID = "scaler-kubernetes-" + uuid.NewString()[:8]
	}
	if req.ServerURL == "" {
		req.ServerURL = "http://127.0.0.1:9" // nothing listens: the agent retries until removed
	}
	if req.Token == "" {
		req.Token = "kat_" + uuid.NewString()
	}
	if req.Event == nil {
		req.Event = func(string, string) {}
	}
	req.Scaler = c
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return b.Spawn(ctx, req)
}

// The pod is the operator's template with kiln's part: the template's
// labels, annotations and spec (service account, node selector,
// tolerations, a sidecar, the agent container's own env and security
// context) are kept; kiln sets the agent container's image (the scaler's,
// the template naming none), command, token (its environment, never the
// arguments; a template's value of it replaced), resources, the labels of
// orphan removal, restartPolicy Never, no service account token, a state
// volume.
// Proves B162 (docs/behaviours.md).
func TestKubernetesPodFromTheTemplate(t *testing.T) {
	f, b, c := setup(t)
	tpl := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(tpl, []byte(`apiVersion: v1
kind: Pod
metadata:
  labels: {team: ci}
  annotations: {example.com/owner: builds}
spec:
  serviceAccountName: kiln-agents
  nodeSelector: {pool: ci}
  tolerations: [{key: dedicated, operator: Equal, value: ci, effect: NoSchedule}]
  containers:
    - name: sidecar
      image: registry.example/busybox:1
    - name: agent
      env:
        - {name: EXTRA, value: kept}
        - {name: KILN_AGENT_TOKEN, value: from-the-template}
      securityContext: {runAsNonRoot: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.PodTemplate = tpl
	req := scaler.SpawnRequest{AgentID: "scaler-kubernetes-0a1b2c3d", Labels: []string{"linux", "pods"}, Token: "kat_secret",
		CPUs: 0.5, MemoryBytes: 256 << 20, Env: map[string]string{"FOO": "bar"}}
	inst, err := spawn(t, b, c, req)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	pod := f.Pods("kiln-ci")["kiln-scaler-kubernetes-0a1b2c3d"]
	if pod == nil {
		t.Fatalf("no pod kiln-scaler-kubernetes-0a1b2c3d in namespace kiln-ci: %v", f.Pods("kiln-ci"))
	}
	l := pod.Labels
	if l["team"] != "ci" || l[LabelScaler] != "pods" || l[LabelInstance] != b.Instance || l[LabelAgent] != req.AgentID {
		t.Fatalf("labels %v", l)
	}
	s := pod.Spec
	if pod.Annotations["example.com/owner"] != "builds" || s.ServiceAccountName != "kiln-agents" || s.NodeSelector["pool"] != "ci" ||
		len(s.Tolerations) != 1 || len(s.Containers) != 2 || s.Containers[0].Name != "sidecar" || s.Containers[0].Image != noKilnImage {
		t.Fatalf("the template's part was not kept: %+v", pod)
	}
	if s.RestartPolicy != corev1.RestartPolicyNever || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Fatalf("restartPolicy %s, automountServiceAccountToken %v", s.RestartPolicy, s.AutomountServiceAccountToken)
	}
	a := s.Containers[1]
	if a.Image != agentImage || !slices.Equal(a.Command, []string{"kiln"}) || a.SecurityContext == nil || a.SecurityContext.RunAsNonRoot == nil {
		t.Fatalf("agent container %+v", a)
	}
	args := strings.Join(a.Args, " ")
	for _, want := range []string{"agent ", "--id scaler-kubernetes-0a1b2c3d", "--labels linux,pods", "--max-jobs 1", "--server http://127.0.0.1:9"} {
		if !strings.Contains(args, want) {
			t.Fatalf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "kat_secret") {
		t.Fatalf("the token is in the arguments: %q", args)
	}
	env := map[string][]string{}
	for _, e := range a.Env {
		env[e.Name] = append(env[e.Name], e.Value)
	}
	if !slices.Equal(env["KILN_AGENT_TOKEN"], []string{"kat_secret"}) || !slices.Equal(env["EXTRA"], []string{"kept"}) || !slices.Equal(env["FOO"], []string{"bar"}) {
		t.Fatalf("env %v", env)
	}
	r := a.Resources
	if r.Requests.Cpu().String() != "500m" || r.Limits.Cpu().String() != "500m" || r.Requests.Memory().String() != "256Mi" || r.Limits.Memory().String() != "256Mi" {
		t.Fatalf("resources %+v", r)
	}
	if !slices.ContainsFunc(a.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == stateDir }) {
		t.Fatalf("no state volume mounted: %+v", a.VolumeMounts)
	}
	if err := inst.Destroy(context.Background(), "job-complete"); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if left := f.Pods("kiln-ci"); len(left) != 0 {
		t.Fatalf("the pod is still there after Destroy returned")
	}
	// An explicit namespace wins over the kubeconfig's.
	c.PodTemplate, c.Namespace = "", "default"
	inst, err = spawn(t, b, c, scaler.SpawnRequest{})
	if err != nil {
		t.Fatalf("spawn in default: %v", err)
	}
	if len(f.Pods("default")) != 1 {
		t.Fatalf("no pod in namespace default")
	}
	_ = inst.Destroy(context.Background(), "job-complete")
}
