package e2e

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/scalertest"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

// dockerServer starts a server whose one scaler is a docker scaler with
// image; whatever containers it leaves are removed when the test ends.
func dockerServer(t *testing.T, cli *client.Client, image string, opts ...func(*server.Config)) *kilnServer {
	t.Helper()
	s := startServer(t, append([]func(*server.Config){func(c *server.Config) {
		c.Scalers = []scaler.Config{{Name: "boxes", Type: "docker", Image: image, Labels: kiln.Labels{"boxed"}, MaxAgents: 2,
			SpawnTimeout: 2 * time.Minute}}
	}}, opts...)...)
	t.Cleanup(func() {
		if id, err := os.ReadFile(filepath.Join(s.Config.DataDir, "instance-id")); err == nil {
			scalertest.RemoveContainers(t, cli, strings.TrimSpace(string(id)))
		}
	})
	return s
}

const boxedWorkflow = `on: push
jobs:
  one:
    runs_on: [boxed]
    checkout: false
    steps:
      - run: echo "in a box $KILN_AGENT_ID"
`

// waitProvisioningError waits for the run's job one to stay queued with a
// provisioning error, which its pending reason shows, and returns it. Once
// the scaler's back-off after the failure is over it spawns again, and the
// reason reads "spawning an agent" while the error stays: a poll that
// comes that late (a loaded machine) waits for the next failure.
func waitProvisioningError(t *testing.T, s *kilnServer, runID string) api.Job {
	var job api.Job
	waittest.UntilState(t, 2*time.Minute, "the spawn failure on the queued job and in its reason", func() (bool, string) {
		r := getRun(t, s.Client, runID)
		job = mustJob(t, r, "one")
		return job.Status == kiln.JobQueued && job.LastProvisioningError != "" &&
			strings.HasPrefix(job.PendingReason, "provisioning failed: "), describeRun(r)
	})
	return job
}

// A push's job runs on a container a docker scaler starts for it, which is
// removed once the job ended.
// Proves B185, B190 (docs/behaviours.md).
func TestDockerScalerRunsTheJobInAFreshContainer(t *testing.T) {
	t.Parallel()
	cli := scalertest.DockerClient(t)
	s := dockerServer(t, cli, scalertest.AgentImage(t, cli))
	localRun(t, s, map[string]string{"ci": boxedWorkflow})
	run := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, 3*time.Minute)
	if j := mustJob(t, run, "one"); run.Status != kiln.RunSuccess || !strings.HasPrefix(j.AgentID, "scaler-docker-") {
		t.Fatalf("%s", describeRun(run))
	}
	waitNoContainers(t, s, cli)
}

func waitNoContainers(t *testing.T, s *kilnServer, cli *client.Client) {
	id, err := os.ReadFile(filepath.Join(s.Config.DataDir, "instance-id"))
	if err != nil {
		t.Fatal(err)
	}
	d := &scaler.Docker{Client: cli, Instance: strings.TrimSpace(string(id))}
	waittest.UntilState(t, time.Minute, "the server's containers to be removed", func() (bool, string) {
		ids, err := d.Containers(bg, "")
		return err == nil && len(ids) == 0, fmt.Sprint(ids, err)
	})
}

// A docker scaler whose image is not on the engine: the spawn fails
// naming the image, and that is the queued job's provisioning error and
// pending reason.
// Proves B189 (docs/behaviours.md).
func TestDockerScalerMissingImageShowsOnTheJob(t *testing.T) {
	t.Parallel()
	cli := scalertest.DockerClient(t)
	s := dockerServer(t, cli, "kiln-agent-test:no-such-image")
	localRun(t, s, map[string]string{"ci": boxedWorkflow})
	job := waitProvisioningError(t, s, triggerOne(t, s.Client, "app").ID)
	if !strings.Contains(job.LastProvisioningError, `image "kiln-agent-test:no-such-image" is not on this Docker engine`) {
		t.Fatalf("provisioning error %q", job.LastProvisioningError)
	}
	waitNoContainers(t, s, cli)
}

// An image without kiln: the container cannot start, the spawn fails
// saying so, on the queued job, and the container is removed.
// Proves B189 (docs/behaviours.md).
func TestDockerScalerImageWithoutKilnShowsOnTheJob(t *testing.T) {
	t.Parallel()
	cli := scalertest.DockerClient(t)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("SKIPPED: no /bin/busybox: %v", err)
	}
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))})
	_, _ = tw.Write(bb)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/sh", Linkname: "busybox"})
	_ = tw.Close()
	const tag = "kiln-agent-test:without-kiln"
	res, err := cli.ImageImport(bg, client.ImageImportSource{Source: &b, SourceName: "-"}, tag,
		client.ImageImportOptions{Changes: []string{"ENV PATH=/bin"}})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	_, _ = io.Copy(io.Discard, res)
	_ = res.Close()
	s := dockerServer(t, cli, tag)
	localRun(t, s, map[string]string{"ci": boxedWorkflow})
	job := waitProvisioningError(t, s, triggerOne(t, s.Client, "app").ID)
	if !strings.Contains(job.LastProvisioningError, "agent container error: start:") || !strings.Contains(job.LastProvisioningError, "kiln") {
		t.Fatalf("provisioning error %q", job.LastProvisioningError)
	}
	waitNoContainers(t, s, cli)
}

// A container killed during its job: the agent is lost, the job follows
// on_agent_lost (fail) once the recovery window is over, and the
// container is removed.
// Proves B190 (docs/behaviours.md).
func TestDockerScalerContainerKilledMidJobFollowsOnAgentLost(t *testing.T) {
	t.Parallel()
	cli := scalertest.DockerClient(t)
	s := dockerServer(t, cli, scalertest.AgentImage(t, cli))
	localRun(t, s, map[string]string{"ci": `on: push
jobs:
  one:
    runs_on: [boxed]
    checkout: false
    on_agent_lost: fail
    steps:
      - run: echo started; sleep 300
`})
	run := triggerOne(t, s.Client, "app")
	var job api.Job
	waittest.UntilState(t, 3*time.Minute, "the job running in its container", func() (bool, string) {
		r := getRun(t, s.Client, run.ID)
		job = mustJob(t, r, "one")
		return job.Status == kiln.JobRunning && job.AgentID != "", describeRun(r)
	})
	d := &scaler.Docker{Client: cli}
	ids, err := d.ContainersOf(bg, job.AgentID)
	if err != nil || len(ids) != 1 {
		t.Fatalf("the container of %s: %v %v", job.AgentID, ids, err)
	}
	if _, err := cli.ContainerKill(bg, ids[0], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatalf("kill: %v", err)
	}
	run = waitRun(t, s.Client, run.ID, 2*time.Minute)
	if j := mustJob(t, run, "one"); j.Status != kiln.JobAgentLost || !strings.Contains(j.Error, "on_agent_lost: fail") {
		t.Fatalf("%s\njob error %q", describeRun(run), j.Error)
	}
	waitNoContainers(t, s, cli)
}

// dockerServerProc starts `kiln server` as a process whose configuration
// file holds one docker scaler, with the recovery window given.
func dockerServerProc(t *testing.T, cli *client.Client, window string) (*serverProc, *api.Client) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "kiln.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`scalers:
  - name: boxes
    type: docker
    image: %s
    labels: [boxed]
    max_agents: 2
    spawn_timeout: 2m
`, scalertest.AgentImage(t, cli))), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerProc(t, dir, 0, "--config", cfg, "--set", "agents.recovery_window="+window)
	t.Cleanup(func() {
		if id, err := os.ReadFile(filepath.Join(dir, "instance-id")); err == nil {
			scalertest.RemoveContainers(t, cli, strings.TrimSpace(string(id)))
		}
	})
	return srv, procClient(t, srv)
}

// runningInContainer triggers the workflow and waits for its job one to
// run; it returns the run and the job's container.
func runningInContainer(t *testing.T, c *api.Client, cli *client.Client, wf string) (api.Run, string) {
	r := newRepo(t, map[string]string{workflow("ci"): wf})
	addLocalSource(t, c, "app", r.dir)
	run := triggerOne(t, c, "app")
	var job api.Job
	waittest.UntilState(t, 3*time.Minute, "the job running in its container", func() (bool, string) {
		rr := getRun(t, c, run.ID)
		job = mustJob(t, rr, "one")
		return job.Status == kiln.JobRunning && job.AgentID != "", describeRun(rr)
	})
	ids, err := (&scaler.Docker{Client: cli}).ContainersOf(bg, job.AgentID)
	if err != nil || len(ids) != 1 {
		t.Fatalf("the container of %s: %v %v", job.AgentID, ids, err)
	}
	return run, ids[0]
}

func waitInstanceContainersGone(t *testing.T, cli *client.Client, dataDir string) {
	id, err := os.ReadFile(filepath.Join(dataDir, "instance-id"))
	if err != nil {
		t.Fatal(err)
	}
	d := &scaler.Docker{Client: cli, Instance: strings.TrimSpace(string(id))}
	waittest.UntilState(t, 2*time.Minute, "the server's containers to be removed", func() (bool, string) {
		ids, err := d.Containers(bg, "")
		return err == nil && len(ids) == 0, fmt.Sprint(ids, err)
	})
}

// The server killed and restarted while a docker scaler's agent runs a
// job: the agent reconnects within the recovery window, is adopted, and
// its job finishes; its container is removed afterwards.
// Proves B191 (docs/behaviours.md).
func TestDockerScalerServerRestartedInsideTheWindowJobFinishes(t *testing.T) {
	t.Parallel()
	cli := scalertest.DockerClient(t)
	srv, c := dockerServerProc(t, cli, "60s")
	run, _ := runningInContainer(t, c, cli, `on: push
jobs:
  one:
    runs_on: [boxed]
    checkout: false
    steps:
      - run: sleep 8; echo survived
`)
	srv.signal(t, syscall.SIGKILL)
	srv.wait(t, 10*time.Second)
	srv.restart(t)
	run = waitRun(t, c, run.ID, 3*time.Minute)
	if j := mustJob(t, run, "one"); run.Status != kiln.RunSuccess || j.Dispatches != 1 {
		t.Fatalf("%s", describeRun(run))
	}
	waitInstanceContainersGone(t, cli, srv.dataDir)
}

// The server killed and restarted while its agent's container is frozen
// (SIGSTOP) past the recovery window: the container is removed and the
// job follows on_agent_lost.
// Proves B192 (docs/behaviours.md).
func TestDockerScalerServerRestartedPastTheWindowRemovesTheContainer(t *testing.T) {
	t.Parallel()
	cli := scalertest.DockerClient(t)
	srv, c := dockerServerProc(t, cli, "5s")
	run, ctr := runningInContainer(t, c, cli, `on: push
jobs:
  one:
    runs_on: [boxed]
    checkout: false
    on_agent_lost: fail
    steps:
      - run: sleep 300
`)
	if _, err := cli.ContainerKill(bg, ctr, client.ContainerKillOptions{Signal: "STOP"}); err != nil {
		t.Fatalf("freeze the agent: %v", err)
	}
	srv.signal(t, syscall.SIGKILL)
	srv.wait(t, 10*time.Second)
	srv.restart(t)
	run = waitRun(t, c, run.ID, 3*time.Minute)
	if j := mustJob(t, run, "one"); j.Status != kiln.JobAgentLost || !strings.Contains(j.Error, "on_agent_lost: fail") {
		t.Fatalf("%s\njob error %q", describeRun(run), j.Error)
	}
	waitInstanceContainersGone(t, cli, srv.dataDir)
}
