package workflow

import (
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// checkNeeds validates the needs graph once every job is known: each need
// names an existing job, once, not itself, and the graph has no cycle.
// nodes[j][i] is where j.Needs[i] is written.
func (p *parser) checkNeeds(w *Workflow, nodes map[*Job][]*yaml.Node) {
	ids := make([]string, len(w.Jobs))
	for i, j := range w.Jobs {
		ids[i] = j.ID
	}
	for _, j := range w.Jobs {
		seen := map[string]bool{}
		kept := j.Needs[:0:0]
		var keptNodes []*yaml.Node
		for i, need := range j.Needs {
			n := nodes[j][i]
			switch {
			case need.Job == j.ID:
				p.errorf(n, "needs: job %q cannot need itself", j.ID)
				continue
			case w.jobs[need.Job] == nil:
				p.errorf(n, "needs: job %q does not exist%s", need.Job, needHint(need.Job, ids))
				continue
			case seen[need.Job]:
				p.errorf(n, "needs: job %q is listed twice", need.Job)
				continue
			}
			seen[need.Job] = true
			kept = append(kept, need)
			keptNodes = append(keptNodes, n)
		}
		j.Needs, nodes[j] = kept, keptNodes
	}
	p.checkCycles(w, nodes)
}

// needHint suggests a job for an unknown need; a matrix child's name points
// at its job, since needs names jobs and waits for all their children.
func needHint(name string, ids []string) string {
	if base, _, ok := strings.Cut(name, " ("); ok && strings.HasSuffix(name, ")") {
		for _, id := range ids {
			if id == base {
				return "; needs names whole jobs (needs: [" + base + "] waits for every child); read one child's result with needs['" + name + "'] in an expression"
			}
		}
	}
	return didYouMean(name, ids)
}

// checkCycles reports each cycle of the needs graph once, naming it.
func (p *parser) checkCycles(w *Workflow, nodes map[*Job][]*yaml.Node) {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	inCycle := map[string]bool{}
	var stack []*Job
	var visit func(j *Job)
	visit = func(j *Job) {
		color[j.ID] = grey
		stack = append(stack, j)
		for i, need := range j.Needs {
			next := w.jobs[need.Job]
			switch color[need.Job] {
			case white:
				visit(next)
			case grey:
				p.reportCycle(stack, next, inCycle, nodes[j], j, i)
			}
		}
		stack = stack[:len(stack)-1]
		color[j.ID] = black
	}
	for _, j := range w.Jobs {
		if color[j.ID] == white {
			visit(j)
		}
	}
}

// reportCycle names the cycle that closes at `to` (already on the stack).
func (p *parser) reportCycle(stack []*Job, to *Job, inCycle map[string]bool, jobNodes []*yaml.Node, from *Job, needIdx int) {
	start := 0
	for i, s := range stack {
		if s == to {
			start = i
		}
	}
	cycle := stack[start:]
	names := make([]string, 0, len(cycle)+1)
	fresh := false
	for _, c := range cycle {
		names = append(names, c.ID)
		if !inCycle[c.ID] {
			fresh = true
		}
		inCycle[c.ID] = true
	}
	if !fresh {
		return
	}
	names = append(names, to.ID)
	n := &yaml.Node{Line: from.Pos.Line, Column: from.Pos.Col}
	if needIdx < len(jobNodes) {
		n = jobNodes[needIdx]
	}
	p.errorf(n, "needs: cycle %s; a job cannot wait, directly or indirectly, for itself", strings.Join(names, " → "))
}
