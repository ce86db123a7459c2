package fleet

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// A job released while an agent idles is pushed to it at once, and the
// agent's reports carry it to its end: started, a step, logs, success; the
// dependent job follows on the same agent.
// Proves B29 (docs/behaviours.md).
func TestPushDispatchLifecycle(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		c, ack := h.connect(secret, reg{id: "build-1", labels: []string{"docker"}})
		if ack.Labels == nil || !kiln.Labels(ack.Labels).Has("linux") || !kiln.Labels(ack.Labels).Has("docker") ||
			ack.HeartbeatIntervalMS != proto.DefaultHeartbeatInterval.Milliseconds() {
			t.Fatalf("register.ack %+v", ack)
		}
		runID, jobs := h.run(job("build", "linux"), testJob{name: "deploy", runsOn: []string{"linux"}, needs: []string{"build"}})
		d := expect[*proto.Dispatch](c)
		if d.JobID != jobs["build"] || d.RunID != runID || d.LeaseEpoch != 1 || d.Attempt != 1 || d.Spec.Name != "build" || len(d.Spec.Steps) != 1 {
			t.Fatalf("dispatch %+v", d)
		}
		c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
		c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
		code := 0
		c.send(&proto.StepStatus{JobID: d.JobID, LeaseEpoch: 1, Index: 0, Name: "build", Status: kiln.StepRunning})
		c.send(&proto.Log{JobID: d.JobID, LeaseEpoch: 1, Step: 0, Lines: []proto.LogLine{
			{Seq: 1, Stream: proto.StreamStdout, Text: "one"}, {Seq: 2, Stream: proto.StreamStderr, Text: "two"}}})
		c.send(&proto.StepStatus{JobID: d.JobID, LeaseEpoch: 1, Index: 0, Name: "build", Status: kiln.StepSuccess, ExitCode: &code})
		c.waitAck(c.seq)
		j := h.waitStatus(d.JobID, kiln.JobRunning)
		if len(j.Steps) == 0 || j.Steps[0].Status != kiln.StepSuccess {
			t.Fatalf("steps %+v", j.Steps)
		}
		lines, err := h.logs.Read(logstore.Ref{RunID: runID, JobID: d.JobID, Epoch: 1, Step: 0}, 0, 10)
		if err != nil || len(lines) != 2 || lines[1].Text != "two" {
			t.Fatalf("stored log %+v %v", lines, err)
		}
		if hw, _ := h.db.Logs().HighWater(bg, d.JobID, 0); hw != 2 {
			t.Fatalf("the step's chunk index says %d, want 2", hw)
		}
		c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobSuccess, Outputs: map[string]string{"v": "1"}, Time: time.Now()})
		// The dependent is released and pushed to the freed agent.
		d2 := expect[*proto.Dispatch](c)
		if d2.JobID != jobs["deploy"] {
			t.Fatalf("second dispatch %+v", d2)
		}
		if j := h.waitStatus(jobs["build"], kiln.JobSuccess); j.Outputs["v"] != "1" {
			t.Fatalf("outputs %+v", j.Outputs)
		}
		c.runJob(d2, kiln.JobSuccess)
		h.waitStatus(jobs["deploy"], kiln.JobSuccess)
		waittest.Until(t, waittest.Timeout, "the run succeeds", func() bool {
			r, _ := h.db.Runs().Get(bg, runID)
			return r.Status == kiln.RunSuccess
		})
		// Both dispatches are timed, deploy's too: it was released and
		// claimed in the commit of build's success, before any wake.
		st := h.f.Stats()
		if st.Dispatched != 2 || st.DispatchLatency.Count != 2 || st.AckLatency.Count != 2 || st.Agents != 1 || st.LogLines != 3 {
			t.Fatalf("stats %+v", st)
		}
		infos := h.f.Agents()
		if len(infos) != 1 || infos[0].ID != "build-1" || infos[0].ActiveJobs != 0 || !infos[0].Healthy || infos[0].Hostname != "host-build-1" {
			t.Fatalf("agents %+v", infos)
		}
	})
}

// An agent with free capacity takes the oldest queued job it accepts,
// whatever its key: FIFO across keys.
// Proves B29 (docs/behaviours.md).
func TestFIFOAcrossKeys(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		var ids []string
		for i, labels := range [][]string{{"linux"}, {"linux", "docker"}, {"linux"}, {"docker"}} {
			_, jobs := h.run(job("j"+string(rune('0'+i)), labels...))
			ids = append(ids, jobs["j"+string(rune('0'+i))])
		}
		c, _ := h.connect(secret, reg{id: "a", labels: []string{"docker"}})
		for i, want := range ids {
			d := expect[*proto.Dispatch](c)
			if d.JobID != want {
				t.Fatalf("dispatch %d: got %s, want %s", i, d.JobID, want)
			}
			c.runJob(d, kiln.JobSuccess)
		}
	})
}

// A waiting job says why it waits: no agent with its labels (naming the
// closest agent), all matching agents busy, all draining; the reason and
// its since-time change only when the reason does.
// Proves B34 (docs/behaviours.md).
func TestPendingReasons(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		_, jobs := h.run(job("gpu", "linux", "gpu"))
		gpu := jobs["gpu"]
		reason := func(want string) store.Job {
			t.Helper()
			var j store.Job
			waittest.Until(t, waittest.Timeout, "pending reason "+want, func() bool {
				j = h.job(gpu)
				return strings.Contains(j.PendingReason, want)
			})
			return j
		}
		first := reason("no connected agent with labels gpu, linux")
		h.connect(secret, reg{id: "build-1"})
		if j := reason("closest: agent build-1 lacks gpu"); j.PendingSince.Before(first.PendingSince) {
			t.Fatalf("the new reason's time %v is before the old one's %v", j.PendingSince, first.PendingSince)
		}

		// A matching agent that is busy.
		c2, _ := h.connect(secret, reg{id: "gpu-1", labels: []string{"gpu"}})
		d := expect[*proto.Dispatch](c2)
		c2.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
		_, more := h.run(job("gpu2", "gpu"))
		var j2 store.Job
		waittest.Until(t, waittest.Timeout, "busy reason", func() bool {
			j2 = h.job(more["gpu2"])
			return j2.PendingReason == "the one matching agent is busy"
		})
		since := j2.PendingSince
		// Redrives keep the reason and its time.
		h.sweeps(20)
		if again := h.job(more["gpu2"]); again.PendingReason != j2.PendingReason || !again.PendingSince.Equal(since) {
			t.Fatalf("reason rewritten: %q since %v (was %v)", again.PendingReason, again.PendingSince, since)
		}
		if err := h.f.Drain("gpu-1"); err != nil {
			t.Fatal(err)
		}
		expect[*proto.Drain](c2)
		waittest.Until(t, waittest.Timeout, "draining reason", func() bool {
			return h.job(more["gpu2"]).PendingReason == "the one matching agent is draining"
		})
	})
}

// Mandatory labels gate dispatch: a tainted agent takes only jobs asking
// for its mandatory labels.
// Proves B28 (docs/behaviours.md).
func TestMandatoryLabels(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{Mandatory: kiln.NewLabels("gpu")})
		c, ack := h.connect(secret, reg{id: "gpu-1"})
		if !kiln.Labels(ack.Labels).Has("gpu") || len(ack.Mandatory) != 1 || ack.Mandatory[0] != "gpu" {
			t.Fatalf("register.ack %+v", ack)
		}
		_, jobs := h.run(job("plain", "linux"), job("gpu", "linux", "gpu"))
		d := expect[*proto.Dispatch](c)
		if d.JobID != jobs["gpu"] {
			t.Fatalf("the tainted agent got %s", d.JobID)
		}
		c.runJob(d, kiln.JobSuccess)
		c.quiet(100 * time.Millisecond)
		if j := h.job(jobs["plain"]); j.Status != kiln.JobQueued || !strings.Contains(j.PendingReason, "mandatory label gpu") {
			t.Fatalf("plain job %s, reason %q", j.Status, j.PendingReason)
		}
	})
}

// A run's cancel reaches the agent running its job as job.cancel, and the
// agent's cancelled status ends the job; a cancel that comes before its
// job's dispatch was written follows the dispatch.
func TestCancel(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		c, _ := h.connect(secret, reg{id: "a"})
		runID, jobs := h.run(job("j", "linux"))
		d := expect[*proto.Dispatch](c)
		c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: 1})
		c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
		c.waitAck(c.seq)
		res, err := h.db.Runs().Cancel(bg, runID, "cancelled by alice", false)
		if err != nil || len(res.Cancelling) != 1 {
			t.Fatalf("cancel %+v %v", res, err)
		}
		for _, ct := range res.Cancelling {
			h.f.Cancel(ct, false, "cancelled by alice")
		}
		m := expect[*proto.Cancel](c)
		if m.JobID != d.JobID || m.LeaseEpoch != 1 || m.Force || m.Reason != "cancelled by alice" {
			t.Fatalf("cancel frame %+v", m)
		}
		c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobCancelled, Time: time.Now()})
		h.waitStatus(jobs["j"], kiln.JobCancelled)

		// An agent that reports itself draining takes nothing; a cancel
		// recorded for the job before its dispatch follows the dispatch.
		c2, _ := h.connect(secret, reg{id: "b"})
		c.ws.CloseNow()
		c2.send(&proto.AgentStatus{Draining: true})
		waittest.Until(t, waittest.Timeout, "the agent drains", func() bool {
			as := h.f.reg.get("b")
			as.mu.Lock()
			defer as.mu.Unlock()
			return as.draining
		})
		_, jobs = h.run(job("k", "linux"))
		h.f.Cancel(store.CancelTarget{JobID: jobs["k"], AgentID: "b", Epoch: 1}, true, "stop it")
		c2.send(&proto.AgentStatus{Draining: false})
		d2 := expect[*proto.Dispatch](c2)
		m2 := expect[*proto.Cancel](c2)
		if d2.JobID != jobs["k"] || m2.JobID != jobs["k"] || !m2.Force {
			t.Fatalf("dispatch %+v, then cancel %+v", d2, m2)
		}
	})
}

// The checkout is made when the job is sent: the fleet asks its clone
// credentials with where the job's code lives, and sends what they return
// (credentials included) without storing it; when they fail, the job is
// requeued with the attempt counted. A job without a checkout is sent
// without one, and the credentials are not asked.
func TestCloneCredentials(t *testing.T) {
	creds := &testCredentials{}
	h := start(t, storetest.Backends[0], options{cfg: fastConfig(), creds: creds})
	_, secret := h.token(store.AgentTokenSpec{})
	c, _ := h.connect(secret, reg{id: "a"})
	src := &jobspec.Checkout{Source: "gh", Repository: "acme/app", URL: "https://forge/acme/app.git", Ref: "refs/heads/main", SHA: "abc"}
	j := job("j", "linux")
	j.checkout = src
	_, jobs := h.run(j)
	d := expect[*proto.Dispatch](c)
	want := proto.Checkout{URL: "https://x-access@forge/acme/app.git", Ref: "refs/heads/main", SHA: "abc",
		Auth: &proto.GitAuth{Username: "x-access-token", Password: "s3cret"}}
	if d.Spec.Checkout == nil || !reflect.DeepEqual(*d.Spec.Checkout, want) || d.Spec.Name != "j" || len(d.Spec.Steps) != 1 {
		t.Fatalf("spec %+v, checkout %+v", d.Spec, d.Spec.Checkout)
	}
	if asked := creds.asked(); len(asked) != 1 || asked[0] != *src {
		t.Fatalf("credentials asked for %+v, want %+v", asked, *src)
	}
	if j := h.job(jobs["j"]); strings.Contains(string(j.Spec), "s3cret") {
		t.Fatal("a credential was stored")
	}
	c.runJob(d, kiln.JobSuccess)

	_, _ = h.run(job("plain", "linux"))
	if d := expect[*proto.Dispatch](c); d.Spec.Checkout != nil || len(creds.asked()) != 1 {
		t.Fatalf("a job without a checkout was sent %+v (credentials asked %d times)", d.Spec.Checkout, len(creds.asked()))
	} else {
		c.runJob(d, kiln.JobSuccess)
	}

	creds.fail.Store(true)
	k := job("k", "linux")
	k.checkout = src
	_, jobs = h.run(k)
	waittest.Until(t, waittest.Timeout, "the job fails after its attempts", func() bool {
		j := h.job(jobs["k"])
		return j.Status == kiln.JobFailed && strings.Contains(j.Error, "token service is down") && j.Attempts == store.DefaultMaxAttempts
	})
}

// testCredentials mints a fixed credential, or fails.
type testCredentials struct {
	fail atomic.Bool
	mu   sync.Mutex
	srcs []jobspec.Checkout
}

func (c *testCredentials) Checkout(_ context.Context, src jobspec.Checkout) (*proto.Checkout, error) {
	c.mu.Lock()
	c.srcs = append(c.srcs, src)
	c.mu.Unlock()
	if c.fail.Load() {
		return nil, errors.New("the token service is down")
	}
	return &proto.Checkout{URL: "https://x-access@forge/" + src.Repository + ".git", Ref: src.Ref, SHA: src.SHA,
		Auth: &proto.GitAuth{Username: "x-access-token", Password: "s3cret"}}, nil
}

func (c *testCredentials) asked() []jobspec.Checkout {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]jobspec.Checkout(nil), c.srcs...)
}
