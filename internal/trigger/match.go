package trigger

import (
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/workflow"
)

// Decision is whether an event starts a workflow, with the trace of every
// check made. It is JSON-serializable: the run stores it.
type Decision struct {
	Workflow string         `json:"workflow"`
	File     string         `json:"file"`
	Matched  bool           `json:"matched"`
	Trigger  kiln.EventName `json:"trigger,omitempty"` // the trigger that matched
	Checks   []Check        `json:"checks"`
	Summary  string         `json:"summary"`
}

// Check is one step of the decision: which filter (Check, e.g.
// "on.push.branches") compared which of the event's values (Value) with
// which patterns (Pattern), whether it passed, and why.
type Check struct {
	Check   string `json:"check"`
	Pattern string `json:"pattern,omitempty"`
	Value   string `json:"value,omitempty"`
	Passed  bool   `json:"passed"`
	Reason  string `json:"reason,omitempty"`
}

// MatchAll decides every workflow for one event, in order.
func MatchAll(wfs []*workflow.Workflow, ev *kiln.Event) []Decision {
	out := make([]Decision, 0, len(wfs))
	for _, w := range wfs {
		out = append(out, Match(w, ev))
	}
	return out
}

// Match decides whether ev starts wf.
func Match(wf *workflow.Workflow, ev *kiln.Event) Decision {
	d := Decision{Workflow: wf.Name, File: wf.File, Checks: []Check{}}
	if len(wf.On.Order) == 0 {
		d.Summary = "not started: the workflow has no triggers"
		return d
	}
	var misses []string
	for _, name := range wf.On.Order {
		ok, why := matchTrigger(&d, &wf.On, name, ev)
		if ok {
			d.Matched, d.Trigger = true, name
			d.Summary = fmt.Sprintf("started by the %s trigger: %s", name, why)
			return d
		}
		if name == ev.Name {
			misses = append(misses, fmt.Sprintf("%s: %s", name, why))
		}
	}
	if len(misses) == 0 {
		d.Summary = fmt.Sprintf("not started: the workflow has no %s trigger (it has %s)", ev.Name, joinNames(wf.On.Order))
	} else {
		d.Summary = "not started: " + strings.Join(misses, "; ")
	}
	return d
}

func joinNames(ns []kiln.EventName) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// matchTrigger runs the checks of one trigger, appending them to d, and
// returns whether it matched and the reason of its deciding check.
func matchTrigger(d *Decision, on *workflow.Triggers, name kiln.EventName, ev *kiln.Event) (bool, string) {
	prefix := "on." + string(name)
	if ev.Name != name {
		d.Checks = append(d.Checks, Check{Check: prefix, Pattern: string(name), Value: string(ev.Name), Passed: false,
			Reason: fmt.Sprintf("a %s event does not start a %s trigger", ev.Name, name)})
		return false, "different event"
	}
	d.Checks = append(d.Checks, Check{Check: prefix, Pattern: string(name), Value: string(ev.Name), Passed: true, Reason: "the event is a " + string(name)})
	var checks []Check
	switch name {
	case kiln.EventPush:
		checks = []Check{
			names(prefix+".branches", on.Push.Branches, ev.Branch, "branch"),
			paths(prefix+".paths", on.Push.Paths, ev),
		}
	case kiln.EventPullRequest:
		checks = []Check{
			actions(prefix+".types", on.PullRequest.Types, ev.Action),
			names(prefix+".branches", on.PullRequest.Branches, ev.BaseBranch, "target branch"),
			paths(prefix+".paths", on.PullRequest.Paths, ev),
		}
	case kiln.EventTag:
		checks = []Check{names(prefix, on.Tag.Patterns, ev.Tag, "tag")}
	case kiln.EventSchedule:
		checks = []Check{schedule(prefix, on.Schedule, ev.Schedule)}
	case kiln.EventDispatch:
		return true, "a manual run"
	}
	for _, c := range checks {
		d.Checks = append(d.Checks, c)
		if !c.Passed {
			return false, c.Reason
		}
	}
	reasons := make([]string, 0, len(checks))
	for _, c := range checks {
		reasons = append(reasons, c.Reason)
	}
	return true, strings.Join(reasons, "; ")
}

func actions(check string, types []string, action string) Check {
	c := Check{Check: check, Pattern: strings.Join(types, ", "), Value: action}
	for _, t := range types {
		if t == action {
			c.Passed, c.Reason = true, fmt.Sprintf("action %s is one of the types", action)
			return c
		}
	}
	if action == "" {
		c.Reason = "the event has no action"
	} else {
		c.Reason = fmt.Sprintf("action %s is not one of the types", action)
	}
	return c
}

func schedule(check string, scheds []*workflow.ScheduleTrigger, fired string) Check {
	c := Check{Check: check, Value: fired}
	var crons []string
	for _, s := range scheds {
		crons = append(crons, s.Cron)
		if sameCron(s.Cron, fired) {
			c.Passed, c.Reason = true, fmt.Sprintf("cron %q fired", s.Cron)
		}
	}
	c.Pattern = strings.Join(crons, ", ")
	if !c.Passed {
		c.Reason = fmt.Sprintf("cron %q is not one of this workflow's schedules", fired)
	}
	return c
}

// sameCron compares cron expressions ignoring runs of blanks.
func sameCron(a, b string) bool {
	return strings.Join(strings.Fields(a), " ") == strings.Join(strings.Fields(b), " ")
}
