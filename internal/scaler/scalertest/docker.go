package scalertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/agentimage"
)

var (
	imageOnce sync.Once
	imageTag  string
	imageErr  error
)

// DockerClient returns a client of the local Docker Engine, closed when the
// test ends, skipping the test — loudly, on stderr too — when no engine
// answers.
func DockerClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := scaler.NewDockerClient()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			_ = cli.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "SKIPPED %s: no Docker Engine answers (%v); the docker backend is untested here\n", t.Name(), err)
		t.Skipf("no Docker Engine answers: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// AgentImage builds the agent image once per test binary — a static kiln
// (CGO_ENABLED=0 go build), the host's busybox-static and git — and
// returns its tag, kiln-agent-test:<content hash>: a re-run with nothing
// changed rebuilds kiln from the build cache and imports nothing.
func AgentImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	imageOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kiln-agent-image-")
		if err != nil {
			imageErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "kiln")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/kilnci/kiln/cmd/kiln")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			imageErr = fmt.Errorf("build a static kiln: %v\n%s", err, out.String())
			return
		}
		spec := agentimage.Spec{Kiln: bin}
		sum, err := spec.Hash()
		if err != nil {
			imageErr = err
			return
		}
		res, err := agentimage.Build(ctx, cli, TestImageRepository+":"+sum[:12], spec)
		imageTag, imageErr = res.Tag, err
		if err == nil {
			pruneTestImages(ctx, cli, res.Tag)
		}
	})
	if imageErr != nil {
		t.Fatalf("agent image: %v", imageErr)
	}
	return imageTag
}

// TestImageRepository holds the tests' agent images, one per content.
const TestImageRepository = "kiln-agent-test"

var hashTag = regexp.MustCompile(`^` + TestImageRepository + `:[0-9a-f]{12}$`)

// pruneTestImages removes the tests' agent images of earlier builds (each
// change of kiln is a new one of ~80 MB); one a container still uses
// stays.
func pruneTestImages(ctx context.Context, cli *client.Client, keep string) {
	f := client.Filters{}
	f.Add("reference", TestImageRepository+":*")
	res, err := cli.ImageList(ctx, client.ImageListOptions{Filters: f})
	if err != nil {
		return
	}
	for _, img := range res.Items {
		for _, tag := range img.RepoTags {
			if tag != keep && hashTag.MatchString(tag) {
				_, _ = cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{})
			}
		}
	}
}

// RemoveContainers removes every container of the instance id (a test's
// own), whatever state it is in.
func RemoveContainers(t *testing.T, cli *client.Client, instance string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := &scaler.Docker{Client: cli, Instance: instance}
	ids, err := d.Containers(ctx, "")
	if err != nil {
		t.Errorf("list the test's containers: %v", err)
	}
	for _, id := range ids {
		_, _ = cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	}
}
