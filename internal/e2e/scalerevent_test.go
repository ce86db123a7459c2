package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

// receiver is the operator's automation: it checks each webhook's
// signature, and for a scale-up of the scalers it provisions starts a real
// `kiln agent --claim CODE`.
type receiver struct {
	t         *testing.T
	secret    []byte
	provision map[string]bool // scalers it starts agents for

	mu       sync.Mutex
	ups      []scaler.ScaleUp
	downs    []scaler.ScaleDown
	refused  int
	procs    []*exec.Cmd
	outs     []*bytes.Buffer
	lastBody []byte
	lastSig  string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if !scaler.VerifySignature(rc.secret, body, r.Header.Get(scaler.HeaderSignature)) {
		rc.mu.Lock()
		rc.refused++
		rc.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.lastBody, rc.lastSig = body, r.Header.Get(scaler.HeaderSignature)
	switch r.Header.Get(scaler.HeaderEvent) {
	case "scale-up":
		var up scaler.ScaleUp
		if err := json.Unmarshal(body, &up); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.ups = append(rc.ups, up)
		if rc.provision[up.Scaler] && len(rc.procs) < 4 {
			out := &bytes.Buffer{}
			cmd := exec.Command(kilnBin, "agent", "--server", up.ServerURL, "--claim", up.ClaimCode,
				"--state-dir", rc.t.TempDir(), "--log-format", "json")
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			rc.procs, rc.outs = append(rc.procs, cmd), append(rc.outs, out)
		}
		w.WriteHeader(http.StatusAccepted)
	case "scale-down":
		var down scaler.ScaleDown
		_ = json.Unmarshal(body, &down)
		rc.downs = append(rc.downs, down)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "unknown event", http.StatusBadRequest)
	}
}

func (rc *receiver) scaleUps() []scaler.ScaleUp {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]scaler.ScaleUp(nil), rc.ups...)
}

func (rc *receiver) scaleDown(agentID string) (scaler.ScaleDown, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, d := range rc.downs {
		if d.AgentID == agentID {
			return d, true
		}
	}
	return scaler.ScaleDown{}, false
}

// stop waits for the agents it started (they exit after their job) or
// kills them.
func (rc *receiver) stop() {
	rc.mu.Lock()
	procs := rc.procs
	rc.mu.Unlock()
	for _, p := range procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
}

// An event scaler sends a signed scale-up webhook with a claim code; the
// receiver's `kiln agent --claim CODE` redeems it for the agent's id,
// labels and single-use token and runs the job; once the job is done a
// signed scale-down carries the reason. The code cannot be redeemed again,
// nor can a wrong one, and a tampered body fails the signature. A scaler
// whose receiver starts nothing is reaped by the leader once claim_ttl
// has passed: scaler.failed on the job, its last_provisioning_error, a
// scale-down with spawn-timeout, and its code, expired, is refused.
// Proves B148, B149, B150, B151 (docs/behaviours.md).
func TestEventScalerWebhookClaimAndReaper(t *testing.T) {
	const secretEnv = "KILN_TEST_EVENT_SCALER_SECRET"
	t.Setenv(secretEnv, "s3cret-for-the-webhooks")
	rc := &receiver{t: t, secret: []byte("s3cret-for-the-webhooks"), provision: map[string]bool{"cloud": true}}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	defer rc.stop()
	s := startServer(t, func(c *server.Config) {
		c.Scalers = []scaler.Config{
			{Name: "cloud", Type: "event", Labels: kiln.Labels{"cloudy"}, MaxAgents: 2, TargetURL: hook.URL + "/scale",
				SecretEnv: secretEnv, ClaimTTL: time.Minute, DefaultResources: scaler.Resources{CPUs: 2, Memory: "1g"}},
			{Name: "nowhere", Type: "event", Labels: kiln.Labels{"never"}, MaxAgents: 1, TargetURL: hook.URL + "/scale",
				SecretEnv: secretEnv, ClaimTTL: 2 * time.Second},
		}
	})
	localRun(t, s, map[string]string{"ci": `on: push
jobs:
  one:
    runs_on: [cloudy]
    steps:
      - run: echo "on $KILN_AGENT_ID"
  stranded:
    runs_on: [never]
    steps:
      - run: echo never
`})
	ref := triggerOne(t, s.Client, "app")
	one := waitJob(t, s.Client, ref.ID, "one", 2*time.Minute, "job one to succeed", jobIs(kiln.JobSuccess))
	if !strings.HasPrefix(one.AgentID, "scaler-event-") {
		t.Fatalf("job one ran on %q, not an agent the event scaler asked for", one.AgentID)
	}
	var up scaler.ScaleUp
	for _, u := range rc.scaleUps() {
		if u.AgentID == one.AgentID {
			up = u
		}
	}
	if up.Scaler != "cloud" || up.JobID != one.ID || up.ServerURL != s.URL || !strings.HasPrefix(up.ClaimCode, "kcl_") ||
		up.Labels.Key() != "cloudy" || up.Resources.CPUs != 2 || up.Resources.MemoryBytes != 1<<30 || up.ClaimExpiresAt.IsZero() {
		t.Fatalf("scale-up %+v", up)
	}
	// The code is stored as its hash only.
	var n int
	if err := s.DB.SQL().QueryRowContext(bg, "SELECT COUNT(*) FROM scaler_claims WHERE hash = ?", up.ClaimCode).Scan(&n); err == nil && n != 0 {
		t.Fatal("a claim code is stored in clear")
	}
	down := waitScaleDown(t, rc, one.AgentID)
	if down.Scaler != "cloud" || down.Reason == "" {
		t.Fatalf("scale-down %+v", down)
	}

	// Bad input: the code again, a wrong code, a tampered body.
	anon, err := api.NewClient(s.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	for what, code := range map[string]string{"a reused code": up.ClaimCode, "a wrong code": "kcl_" + strings.Repeat("a", 52),
		"garbage": "../../etc/passwd"} {
		if _, err := anon.ClaimAgent(bg, code); kiln.ErrorCode(err) != kiln.CodeUnauthorized {
			t.Errorf("%s: %v", what, err)
		}
	}
	reuse := exec.Command(kilnBin, "agent", "--server", s.URL, "--claim", up.ClaimCode, "--state-dir", t.TempDir())
	if out, err := reuse.CombinedOutput(); err == nil || !strings.Contains(string(out), "invalid, expired or already used claim code") {
		t.Errorf("kiln agent --claim with a used code: %v\n%s", err, out)
	}
	rc.mu.Lock()
	body, sig := append([]byte(nil), rc.lastBody...), rc.lastSig
	rc.mu.Unlock()
	if !scaler.VerifySignature(rc.secret, body, sig) {
		t.Fatal("the webhook's own signature does not verify")
	}
	tampered := bytes.Replace(body, []byte(`"scale-`), []byte(`"scale_`), 1)
	if scaler.VerifySignature(rc.secret, tampered, sig) || scaler.VerifySignature([]byte("another secret"), body, sig) {
		t.Fatal("a tampered body or another secret verifies")
	}
	resp, err := http.Post(hook.URL, "application/json", bytes.NewReader(tampered))
	if err == nil {
		resp.Body.Close()
	}
	rc.mu.Lock()
	refused := rc.refused
	rc.mu.Unlock()
	if refused != 1 {
		t.Fatalf("the receiver refused %d webhooks, want the tampered one", refused)
	}

	// The stranded job: nothing redeems its code; the reaper fails it.
	stranded := waitJob(t, s.Client, ref.ID, "stranded", time.Minute, "the reaper's failure on the stranded job", func(j api.Job) bool {
		return j.Status == kiln.JobQueued && j.LastProvisioningError != ""
	})
	if !strings.Contains(stranded.LastProvisioningError, "never redeemed its claim code") ||
		!strings.Contains(stranded.LastProvisioningError, "scaler nowhere") {
		t.Fatalf("provisioning error %q", stranded.LastProvisioningError)
	}
	var lost scaler.ScaleUp
	for _, u := range rc.scaleUps() {
		if u.Scaler == "nowhere" {
			lost = u
		}
	}
	if d := waitScaleDown(t, rc, lost.AgentID); d.Reason != "spawn-timeout" {
		t.Fatalf("scale-down of the stranded agent %+v", d)
	}
	if _, err := anon.ClaimAgent(bg, lost.ClaimCode); kiln.ErrorCode(err) != kiln.CodeUnauthorized {
		t.Fatalf("an expired code: %v", err)
	}
	tl, err := s.DB.Runs().Timeline(bg, ref.ID, stranded.ID)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, ev := range tl {
		if ev.Type == scaler.EventFailed {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d scaler.failed on the stranded job's timeline: %+v", failed, tl)
	}
}

func waitScaleDown(t *testing.T, rc *receiver, agentID string) scaler.ScaleDown {
	t.Helper()
	var d scaler.ScaleDown
	waittest.UntilState(t, time.Minute, "the scale-down of "+agentID, func() (bool, string) {
		var ok bool
		d, ok = rc.scaleDown(agentID)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return ok, fmt.Sprintf("scale-downs so far: %+v", rc.downs)
	})
	return d
}
