package trigger

import (
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/workflow"
)

// names checks a branch or tag name against a filter: an empty filter
// matches; a name an exclusion ("!pattern") matches is rejected; otherwise
// it must match one of the other patterns, if there are any.
func names(check string, ps workflow.Patterns, name, what string) Check {
	c := Check{Check: check, Pattern: ps.String(), Value: name}
	if len(ps) == 0 {
		c.Passed, c.Reason = true, fmt.Sprintf("no %s filter", what)
		return c
	}
	if name == "" {
		c.Reason = fmt.Sprintf("the event has no %s", what)
		return c
	}
	includes := 0
	for _, p := range ps {
		if p.Negate && p.Match(name) {
			c.Reason = fmt.Sprintf("%s %s is excluded by %s", what, name, p.Source)
			return c
		}
		if !p.Negate {
			includes++
		}
	}
	if includes == 0 {
		c.Passed, c.Reason = true, fmt.Sprintf("%s %s is not excluded", what, name)
		return c
	}
	for _, p := range ps {
		if !p.Negate && p.Match(name) {
			c.Passed, c.Reason = true, fmt.Sprintf("%s %s matches %s", what, name, p.Source)
			return c
		}
	}
	c.Reason = fmt.Sprintf("%s %s matches none of %s", what, name, ps.String())
	return c
}

// paths checks the event's changed files against a path filter.
func paths(check string, ps workflow.Patterns, ev *kiln.Event) Check {
	c := Check{Check: check, Pattern: ps.String(), Value: describeFiles(ev.ChangedFiles)}
	if len(ps) == 0 {
		c.Passed, c.Reason = true, "no path filter"
		return c
	}
	switch {
	case ev.ChangedFilesStatus == kiln.ChangedFilesUnavailable:
		c.Passed, c.Reason = true, "the changed files are unavailable, so the path filter matches conservatively"
		return c
	case ev.ChangedFilesStatus == "" && len(ev.ChangedFiles) == 0:
		c.Passed, c.Reason = true, "the changed files are not known (the event did not list them), so the path filter matches conservatively"
		return c
	case len(ev.ChangedFiles) == 0:
		c.Reason = "no files changed"
		return c
	}
	var remaining []string
	excludedBy := ""
	for _, f := range ev.ChangedFiles {
		if p, ok := firstMatch(ps, f, true); ok {
			excludedBy = p
			continue
		}
		remaining = append(remaining, f)
	}
	if len(remaining) == 0 {
		c.Reason = fmt.Sprintf("every changed file is excluded (e.g. by %s)", excludedBy)
		return c
	}
	if !hasIncludes(ps) {
		c.Passed, c.Reason = true, fmt.Sprintf("%s is not excluded", remaining[0])
		return c
	}
	for _, f := range remaining {
		if p, ok := firstMatch(ps, f, false); ok {
			c.Passed, c.Reason = true, fmt.Sprintf("%s matches %s", f, p)
			return c
		}
	}
	c.Reason = fmt.Sprintf("none of the %d changed files matches %s", len(ev.ChangedFiles), includes(ps))
	return c
}

// firstMatch returns the first pattern of the given polarity matching s.
func firstMatch(ps workflow.Patterns, s string, negated bool) (string, bool) {
	for _, p := range ps {
		if p.Negate == negated && p.Match(s) {
			return p.Source, true
		}
	}
	return "", false
}

func hasIncludes(ps workflow.Patterns) bool {
	for _, p := range ps {
		if !p.Negate {
			return true
		}
	}
	return false
}

func includes(ps workflow.Patterns) string {
	var out []string
	for _, p := range ps {
		if !p.Negate {
			out = append(out, p.Source)
		}
	}
	return strings.Join(out, ", ")
}

// describeFiles summarizes a changed-file list for a trace.
func describeFiles(files []string) string {
	const show = 3
	switch {
	case len(files) == 0:
		return ""
	case len(files) <= show:
		return strings.Join(files, ", ")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(files[:show], ", "), len(files)-show)
}
