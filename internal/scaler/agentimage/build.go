package agentimage

import (
	"context"
	"fmt"
	"io"

	"github.com/moby/moby/client"
)

// DefaultRepository is the repository of an image built without a tag.
const DefaultRepository = "kiln-agent"

// Result is what Build did.
type Result struct {
	// Tag is the image's name: the one asked for, or kiln-agent:<hash>.
	Tag string
	// ID is the Docker image id.
	ID string
	// Hash is the content hash of the root filesystem.
	Hash string
	// Imported is false when an image with that tag and content existed.
	Imported bool
}

// Build imports the root filesystem into the Docker Engine as tag (empty:
// kiln-agent:<first 12 hex of the content hash>). An image already tagged
// so with the same content hash is kept as it is, so building again after
// no change costs one hash of the files and no import.
func Build(ctx context.Context, cli *client.Client, tag string, s Spec) (Result, error) {
	sum, err := s.Hash()
	if err != nil {
		return Result{}, err
	}
	if tag == "" {
		tag = DefaultRepository + ":" + sum[:12]
	}
	r := Result{Tag: tag, Hash: sum}
	if img, err := cli.ImageInspect(ctx, tag); err == nil && img.Config != nil && img.Config.Labels["io.kilnci.agent-image"] == sum {
		r.ID = img.ID
		return r, nil
	}
	b, sum2, err := s.buffer()
	if err != nil {
		return r, err
	}
	if sum2 != sum {
		return r, fmt.Errorf("the files changed while the image was built; build again")
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: b, SourceName: "-"}, tag,
		client.ImageImportOptions{Changes: Changes(sum), Message: "kiln agent image"})
	if err != nil {
		return r, fmt.Errorf("docker import: %v", err)
	}
	_, _ = io.Copy(io.Discard, res)
	_ = res.Close()
	img, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		return r, fmt.Errorf("the imported image is not there: %v", err)
	}
	r.ID, r.Imported = img.ID, true
	return r, nil
}
