package ingress

import (
	"crypto/sha256"
	"sync"

	"github.com/kilnci/kiln/internal/workflow"
)

// maxParsed bounds the parsed workflows kept; a full cache starts over.
const maxParsed = 256

// parseCache keeps the workflows parsed for earlier deliveries by path and
// exact content: a push to a new commit usually leaves its workflow files
// as they were, and parsing them (YAML, matrix, needs graph, a type check
// of every expression) was a fifth of the time from a webhook to its job
// on SQLite (docs/bench.md). A parsed workflow is never modified after
// Parse — the scheduler shares them by hash the same way — so runs may
// share one. Files that fail to parse are parsed again each time, for
// their errors.
type parseCache struct {
	mu sync.Mutex
	m  map[parseKey]*workflow.Workflow
}

type parseKey struct {
	path string
	sum  [sha256.Size]byte
}

// parse returns path's workflow, parsing content unless it was parsed
// before.
func (c *parseCache) parse(path string, content []byte) (*workflow.Workflow, error) {
	k := parseKey{path: path, sum: sha256.Sum256(content)}
	c.mu.Lock()
	wf := c.m[k]
	c.mu.Unlock()
	if wf != nil {
		return wf, nil
	}
	wf, err := workflow.Parse(path, content)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxParsed {
		c.m = make(map[parseKey]*workflow.Workflow)
	}
	c.m[k] = wf
	c.mu.Unlock()
	return wf, nil
}
