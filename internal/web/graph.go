package web

import (
	"fmt"
	"html"
	"html/template"
	"net/url"
	"strings"

	"github.com/kilnci/kiln/internal/api"
)

// The job graph is drawn on the server as SVG: a column per depth of the
// needs graph (a job sits one column right of its deepest need), jobs in
// run order within a column, an edge from each need to its dependent. The
// jobs table beside it is the text alternative (B305).

const (
	nodeW, nodeH = 190, 30
	colGap       = 50
	rowGap       = 12
	pad          = 8
	maxLabel     = 24
)

// jobGraph returns the SVG of a run's jobs and their needs.
func jobGraph(run api.Run) template.HTML {
	jobs := run.Jobs
	if len(jobs) == 0 {
		return ""
	}
	// A need names a job, or a matrix job's base (all its children).
	byName := map[string][]int{}
	for i, j := range jobs {
		byName[j.Name] = append(byName[j.Name], i)
		if j.Base != "" && j.Base != j.Name {
			byName[j.Base] = append(byName[j.Base], i)
		}
	}
	parents := make([][]int, len(jobs))
	for i, j := range jobs {
		for _, n := range j.Needs {
			parents[i] = append(parents[i], byName[n.Job]...)
		}
	}
	depth := make([]int, len(jobs))
	state := make([]int8, len(jobs)) // 0 new, 1 visiting, 2 done: a cycle (never stored) cannot loop
	var visit func(i int) int
	visit = func(i int) int {
		if state[i] != 0 {
			return depth[i]
		}
		state[i] = 1
		d := 0
		for _, p := range parents[i] {
			if p != i {
				d = max(d, visit(p)+1)
			}
		}
		depth[i], state[i] = d, 2
		return d
	}
	rows := map[int]int{}
	x, y := make([]int, len(jobs)), make([]int, len(jobs))
	cols, maxRows := 0, 0
	for i := range jobs {
		d := visit(i)
		x[i] = pad + d*(nodeW+colGap)
		y[i] = pad + rows[d]*(nodeH+rowGap)
		rows[d]++
		cols, maxRows = max(cols, d+1), max(maxRows, rows[d])
	}
	width := 2*pad + cols*nodeW + (cols-1)*colGap
	height := 2*pad + maxRows*nodeH + (maxRows-1)*rowGap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="graph" role="img" aria-labelledby="graph-title" width="%d" height="%d" viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg">`, width, height, width, height)
	fmt.Fprintf(&b, `<title id="graph-title">Job graph of run #%d: %d jobs; the jobs table lists each job's needs</title>`, run.Number, len(jobs))
	for i := range jobs {
		for _, p := range parents[i] {
			x1, y1 := x[p]+nodeW, y[p]+nodeH/2
			x2, y2 := x[i], y[i]+nodeH/2
			fmt.Fprintf(&b, `<path class="edge" d="M%d %d C%d %d %d %d %d %d"/>`, x1, y1, x1+colGap/2, y1, x2-colGap/2, y2, x2, y2)
		}
	}
	for i, j := range jobs {
		label := j.Name
		if r := []rune(label); len(r) > maxLabel {
			label = string(r[:maxLabel-1]) + "…"
		}
		fmt.Fprintf(&b, `<a href="/runs/%d/jobs/%s"><g id="node-%s" class="node st-%s"><title>%s: %s</title><rect x="%d" y="%d" width="%d" height="%d" rx="4"/><text x="%d" y="%d">%s</text></g></a>`,
			run.Number, url.PathEscape(j.ID), html.EscapeString(j.ID), statusClass(j.Status), html.EscapeString(j.Name), j.Status,
			x[i], y[i], nodeW, nodeH, x[i]+10, y[i]+nodeH/2+5, html.EscapeString(label))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every stranger-written string above is escaped
}
