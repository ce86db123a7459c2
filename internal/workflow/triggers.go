package workflow

import (
	"slices"
	"strings"

	"github.com/kilnci/kiln"
	yaml "go.yaml.in/yaml/v3"
)

// Triggers is a workflow's `on:`: which events start it, with their
// filters. The trigger package matches events against it.
type Triggers struct {
	// Order lists the triggers in the order they were written; the matcher
	// tries them in this order and the first that matches wins.
	Order       []kiln.EventName
	Push        *PushTrigger
	PullRequest *PullRequestTrigger
	Tag         *TagTrigger
	// Schedule holds one entry per cron line; the trigger is present when
	// the list is not empty.
	Schedule []*ScheduleTrigger
	Dispatch *DispatchTrigger
}

// Has reports whether the workflow has a trigger for events named n.
func (t *Triggers) Has(n kiln.EventName) bool { return slices.Contains(t.Order, n) }

// PushTrigger starts a run when a branch is pushed. A push of a tag is a
// tag event, never a push event.
type PushTrigger struct {
	Branches Patterns // empty: every branch
	Paths    Patterns // empty: whatever changed
}

// PullRequestTrigger starts a run for pull request activity.
type PullRequestTrigger struct {
	// Types are the pull request actions that start a run; default
	// DefaultPullRequestTypes.
	Types    []string
	Branches Patterns // the pull request's target (base) branch; empty: any
	Paths    Patterns
}

// TagTrigger starts a run when a tag is pushed.
type TagTrigger struct {
	Patterns Patterns // empty: every tag
}

// DefaultPullRequestTypes are the actions a pull_request trigger reacts to
// when it names none: a pull request was opened, got new commits, or was
// reopened.
var DefaultPullRequestTypes = []string{"opened", "synchronize", "reopened"}

// pullRequestTypes are the actions kiln's normalizers produce.
var pullRequestTypes = []string{
	"opened", "synchronize", "reopened", "closed", "edited", "labeled", "unlabeled",
	"assigned", "unassigned", "ready_for_review", "converted_to_draft",
	"review_requested", "review_request_removed", "locked", "unlocked",
}

// parseOn reads `on:` in any of its three forms: a trigger name, a list of
// names, or a mapping of names to filters.
func (p *parser) parseOn(n *yaml.Node) Triggers {
	var t Triggers
	errsBefore := len(p.errs)
	switch n.Kind {
	case yaml.ScalarNode, yaml.SequenceNode:
		items, _ := p.strList(n, "on")
		for _, it := range items {
			p.addTrigger(&t, it, nil)
		}
	case yaml.MappingNode:
		pairs, _ := p.mapping(n, "on")
		for _, pr := range pairs {
			p.addTrigger(&t, pr.k, pr.v)
		}
	default:
		p.errorf(n, "on: expected a trigger name, a list or a mapping, found %s", describe(n))
		return t
	}
	if len(t.Order) == 0 && len(p.errs) == errsBefore {
		p.errorf(n, "on: names no trigger, so the workflow would never run (use on: dispatch for manual runs only)")
	}
	return t
}

// addTrigger parses one trigger; v is nil in the name-only forms.
func (p *parser) addTrigger(t *Triggers, k, v *yaml.Node) {
	name := kiln.EventName(k.Value)
	if !name.Valid() {
		p.errorf(k, "on: unknown trigger %q; kiln has %s%s", k.Value, strings.Join(triggerNames, ", "), keyHint(k.Value, triggerNames))
		return
	}
	if t.Has(name) {
		p.errorf(k, "on: trigger %s is listed twice", name)
		return
	}
	if v == nil {
		v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: k.Line, Column: k.Column}
	}
	ok := true
	switch name {
	case kiln.EventPush:
		t.Push, ok = p.parsePush(v)
	case kiln.EventPullRequest:
		t.PullRequest, ok = p.parsePullRequest(v)
	case kiln.EventTag:
		t.Tag = &TagTrigger{Patterns: p.patterns(v, "on.tag")}
	case kiln.EventSchedule:
		t.Schedule = p.parseSchedules(k, v)
		ok = len(t.Schedule) > 0
	case kiln.EventDispatch:
		t.Dispatch, ok = p.parseDispatch(v)
	}
	if ok {
		t.Order = append(t.Order, name)
	}
}

func (p *parser) parsePush(n *yaml.Node) (*PushTrigger, bool) {
	pairs, ok := p.mapping(n, "the push trigger")
	f := p.fields(pairs, "the push trigger", pushKeys)
	t := &PushTrigger{}
	if pr, has := f["branches"]; has {
		t.Branches = p.patterns(pr.v, "on.push.branches")
	}
	if pr, has := f["paths"]; has {
		t.Paths = p.patterns(pr.v, "on.push.paths")
	}
	return t, ok
}

func (p *parser) parsePullRequest(n *yaml.Node) (*PullRequestTrigger, bool) {
	pairs, ok := p.mapping(n, "the pull_request trigger")
	f := p.fields(pairs, "the pull_request trigger", pullRequestKeys)
	t := &PullRequestTrigger{Types: DefaultPullRequestTypes}
	if pr, has := f["types"]; has {
		items, _ := p.strList(pr.v, "types")
		var types []string
		for _, it := range items {
			switch {
			case !slices.Contains(pullRequestTypes, it.Value):
				p.errorf(it, "on.pull_request.types: unknown action %q%s", it.Value, actionHint(it.Value))
			case slices.Contains(types, it.Value):
				p.errorf(it, "on.pull_request.types: %q is listed twice", it.Value)
			default:
				types = append(types, it.Value)
			}
		}
		if len(types) > 0 {
			t.Types = types
		} else if len(items) == 0 {
			p.errorf(pr.v, "on.pull_request.types: the list is empty; leave types out for the default (%s)", strings.Join(DefaultPullRequestTypes, ", "))
		}
	}
	t.Types = append([]string(nil), t.Types...)
	if pr, has := f["branches"]; has {
		t.Branches = p.patterns(pr.v, "on.pull_request.branches")
	}
	if pr, has := f["paths"]; has {
		t.Paths = p.patterns(pr.v, "on.pull_request.paths")
	}
	return t, ok
}

func actionHint(a string) string {
	if a == "synchronized" {
		return `; did you mean "synchronize"?`
	}
	return didYouMean(a, pullRequestTypes) + " (actions: " + strings.Join(pullRequestTypes, ", ") + ")"
}

// patterns compiles a filter list. Expressions are not allowed: filters are
// matched before any run (and so any context) exists.
func (p *parser) patterns(n *yaml.Node, key string) Patterns {
	items, _ := p.strList(n, key)
	out := make(Patterns, 0, len(items))
	seen := map[string]bool{}
	for _, it := range items {
		if strings.Contains(it.Value, "${{") {
			p.errorf(it, "%s: expressions are not allowed in on: filters; they are matched before a run exists", key)
			continue
		}
		pat, err := ParsePattern(it.Value)
		if err != nil {
			p.errorf(it, "%s: %s", key, err.Error())
			continue
		}
		if seen[it.Value] {
			p.errorf(it, "%s: %q is listed twice", key, it.Value)
			continue
		}
		seen[it.Value] = true
		out = append(out, pat)
	}
	return out
}
