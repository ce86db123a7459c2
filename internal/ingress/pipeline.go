package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
)

// outcome is what processing decided: the delivery's final status and
// message, and the runs to create (nil: none).
type outcome struct {
	status  kiln.DeliveryStatus
	message string
	start   *engine.StartRequest
	// invalid is set for invalid_workflow: the event and the lint errors,
	// for Config.Invalid.
	invalid *InvalidWorkflows
	// schedules, when not nil, replace the repository's registered
	// schedules (a push to the default branch), in the same transaction.
	schedules *scheduleSet
}

// permanent marks an error that retrying cannot fix (a malformed payload).
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }

// request is what processing needs from any kind of delivery.
type request struct {
	event    *kiln.Event
	workflow string         // dispatch: only this file (base name)
	inputs   map[string]any // dispatch inputs
}

// handle decides what a delivery does. An error is transient (the delivery
// is retried); everything else, including bad payloads and broken
// workflows, is an outcome.
func (p *Processor) handle(ctx context.Context, d store.Delivery) (outcome, error) {
	fs, repo, err := p.sources.Repo(ctx, d.Source)
	if kiln.ErrorCode(err) == kiln.CodeNotFound {
		return outcome{status: kiln.DeliveryFailed, message: "the source was removed before the delivery was processed"}, nil
	}
	if err != nil {
		return outcome{}, err
	}
	req, out, err := p.request(ctx, fs, repo, d)
	var perm permanent
	switch {
	case errors.As(err, &perm):
		return outcome{status: kiln.DeliveryFailed, message: perm.Error()}, nil
	case err != nil:
		return outcome{}, err
	case req == nil:
		return out, nil
	}
	ev := req.event
	var fork forkRules
	var forkSource store.Source
	if ev.Fork != nil {
		if forkSource, fork, err = p.forkPolicy(ctx, d.Source, ev); err != nil {
			return outcome{}, err
		}
		if fork.deny != "" {
			return outcome{status: kiln.DeliveryIgnored, message: fork.deny}, nil
		}
	}
	if ev.SHA == "" {
		sha, err := repo.Resolve(ctx, ev.Repository, ev.Ref)
		if kiln.ErrorCode(err) == kiln.CodeNotFound {
			return outcome{status: kiln.DeliveryFailed, message: fmt.Sprintf("%s does not exist in %s", ev.Ref, ev.Repository)}, nil
		}
		if err != nil {
			return outcome{}, err
		}
		ev.SHA = sha
	}
	if err := trigger.Validate(ev); err != nil {
		return outcome{status: kiln.DeliveryFailed, message: "the event is not valid: " + kiln.ErrorMessage(err)}, nil
	}
	files, err := repo.Workflows(ctx, ev.Repository, ev.SHA)
	if err != nil {
		if kiln.ErrorCode(err) == kiln.CodeNotFound {
			return outcome{status: kiln.DeliveryFailed, message: kiln.ErrorMessage(err)}, nil
		}
		return outcome{}, err
	}
	wfs, contents, problems := p.parsed.parseAll(files, req.workflow)
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, e := range problems {
			msgs[i] = e.Error()
		}
		return outcome{status: kiln.DeliveryInvalidWorkflow, message: clip(strings.Join(msgs, "\n"), 16<<10),
			invalid: &InvalidWorkflows{Source: d.Source, Event: ev, Errors: problems}}, nil
	}
	// The default branch's schedules are replaced in the transaction that
	// finishes the delivery, with its runs: one commit less before the
	// first job reaches an agent.
	out, err = p.matchWorkflows(ctx, repo, ev, req, fork, forkSource, wfs, contents)
	out.schedules = p.schedulesOf(d.Source, ev, wfs, contents)
	return out, err
}

// matchWorkflows decides what the delivery's parsed workflows start.
func (p *Processor) matchWorkflows(ctx context.Context, repo forge.Repo, ev *kiln.Event, req *request, fork forkRules, forkSource store.Source,
	wfs []*workflow.Workflow, contents map[string][]byte) (outcome, error) {
	if len(wfs) == 0 {
		what := "no workflows in .kiln/workflows"
		if req.workflow != "" {
			what = "no workflow " + req.workflow + " in .kiln/workflows"
		}
		return outcome{status: kiln.DeliveryNoMatch, message: fmt.Sprintf("%s at %s", what, short(ev.SHA))}, nil
	}
	if ev.ChangedFilesStatus == "" && needsChangedFiles(wfs, ev.Name) {
		changed, ok, err := repo.ChangedFiles(ctx, ev)
		switch {
		case err != nil:
			p.log.Warn("changed files unavailable; path filters match conservatively", "repository", ev.Repository, "err", err)
			ev.ChangedFilesStatus = kiln.ChangedFilesUnavailable
		case ok:
			ev.ChangedFiles, ev.ChangedFilesStatus = changed, kiln.ChangedFilesFetched
		default:
			ev.ChangedFilesStatus = kiln.ChangedFilesUnavailable
		}
	}
	out, err := p.match(wfs, contents, req)
	if err != nil || out.start == nil || ev.Fork == nil {
		return out, err
	}
	out.start.ForkLabels = fork.labels
	if out.start.Hold = p.holdFor(ctx, forkSource, repo, ev); out.start.Hold != "" {
		out.message += " (" + out.start.Hold + ")"
	}
	return out, nil
}

// match builds the runs of the workflows the event matches.
func (p *Processor) match(wfs []*workflow.Workflow, contents map[string][]byte, req *request) (outcome, error) {
	var matches []engine.Match
	var misses []string
	for _, wf := range wfs {
		dec := trigger.Match(wf, req.event)
		if !dec.Matched {
			misses = append(misses, fmt.Sprintf("%s: %s", wf.Name, dec.Summary))
			continue
		}
		m := engine.Match{Workflow: wf, Content: contents[wf.File], Decision: dec}
		if req.event.Name == kiln.EventDispatch {
			inputs, err := trigger.CoerceInputs(wf.On.Dispatch, req.inputs)
			if err != nil {
				return outcome{status: kiln.DeliveryFailed, message: fmt.Sprintf("%s: %s", wf.Name, kiln.ErrorMessage(err))}, nil
			}
			m.Inputs = inputs
		}
		matches = append(matches, m)
	}
	if len(matches) == 0 {
		return outcome{status: kiln.DeliveryNoMatch, message: clip("no workflow matched: "+strings.Join(misses, "; "), 16<<10)}, nil
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = m.Workflow.Name
	}
	return outcome{
		status:  kiln.DeliveryProcessed,
		message: "started " + strings.Join(names, ", "),
		start:   &engine.StartRequest{Event: req.event, Matches: matches},
	}, nil
}

// request normalizes a delivery into an event. A nil request with an
// outcome means the delivery starts nothing (ping, ignored events).
func (p *Processor) request(ctx context.Context, fs *forge.Source, repo forge.Repo, d store.Delivery) (*request, outcome, error) {
	switch d.Headers[headerKind] {
	case string(kiln.SourceGitHub), string(kiln.SourceGitea):
		if d.Event == "ping" {
			return nil, outcome{status: kiln.DeliveryPing, message: "ping: the webhook works"}, nil
		}
		from := trigger.FromGitHub
		if d.Headers[headerKind] == string(kiln.SourceGitea) {
			from = trigger.FromGitea
		}
		ev, err := from(d.Event, d.Body)
		if trigger.IsIgnored(err) {
			return nil, outcome{status: kiln.DeliveryIgnored, message: err.Error()}, nil
		}
		if err != nil {
			return nil, outcome{}, permanent{fmt.Errorf("the payload cannot be read: %s", kiln.ErrorMessage(err))}
		}
		return &request{event: ev}, outcome{}, nil
	case string(kiln.SourceGeneric):
		t, err := forge.GenericEvent(fs, &forge.Delivery{Source: fs.Name, Kind: kiln.SourceGeneric, Event: d.Event, Body: d.Body})
		if err != nil {
			return nil, outcome{}, permanent{err}
		}
		return &request{event: t.Event, workflow: t.Workflow, inputs: t.Inputs}, outcome{}, nil
	case kindTrigger:
		var push forge.LocalPush
		if err := json.Unmarshal(d.Body, &push); err != nil {
			return nil, outcome{}, permanent{fmt.Errorf("the trigger request does not decode: %v", err)}
		}
		ev, err := forge.LocalEvent(ctx, fs, push, forge.Options{})
		if err != nil {
			if kiln.ErrorCode(err) == kiln.CodeInternal {
				return nil, outcome{}, err
			}
			return nil, outcome{}, permanent{err}
		}
		return &request{event: ev}, outcome{}, nil
	case kindDispatch:
		var sd storedDispatch
		if err := json.Unmarshal(d.Body, &sd); err != nil {
			return nil, outcome{}, permanent{fmt.Errorf("the dispatch request does not decode: %v", err)}
		}
		dr := sd.DispatchRequest
		dr.Actor = sd.Actor
		ev, err := dispatchEvent(ctx, fs, repo, dr)
		if err != nil {
			return nil, outcome{}, err
		}
		return &request{event: ev, workflow: dr.Workflow, inputs: dr.Inputs}, outcome{}, nil
	}
	return nil, outcome{}, permanent{fmt.Errorf("unknown delivery kind %q", d.Headers[headerKind])}
}

// parseAll validates every workflow file; one broken file makes the whole
// delivery invalid (nothing runs), with every lint error listed. A file
// that cannot be read at all is one error at its line 1.
func (c *parseCache) parseAll(files []forge.WorkflowFile, only string) ([]*workflow.Workflow, map[string][]byte, workflow.ErrorList) {
	var wfs []*workflow.Workflow
	contents := map[string][]byte{}
	var problems workflow.ErrorList
	for _, f := range files {
		if only != "" && !named(f.Path, only) {
			continue
		}
		if f.Err != nil {
			problems = append(problems, &workflow.Error{File: f.Path, Line: 1, Col: 1, Msg: kiln.ErrorMessage(f.Err)})
			continue
		}
		wf, err := c.parse(f.Path, f.Content)
		var list workflow.ErrorList
		switch {
		case errors.As(err, &list):
			problems = append(problems, list...)
			continue
		case err != nil:
			problems = append(problems, &workflow.Error{File: f.Path, Line: 1, Col: 1, Msg: err.Error()})
			continue
		}
		wfs = append(wfs, wf)
		contents[wf.File] = f.Content
	}
	return wfs, contents, problems
}

// named reports whether a dispatch's workflow name means the file at p: its
// path (.kiln/workflows/deploy.yml, as a generic webhook's dispatch gives
// it), its file name (deploy.yml, as the CLI and the API take it) or that
// without the extension (deploy).
func named(p, name string) bool {
	base := path.Base(p)
	return name == p || name == base || name == strings.TrimSuffix(base, path.Ext(base))
}

// needsChangedFiles reports whether any trigger for this event filters paths.
func needsChangedFiles(wfs []*workflow.Workflow, name kiln.EventName) bool {
	for _, wf := range wfs {
		switch {
		case name == kiln.EventPush && wf.On.Push != nil && len(wf.On.Push.Paths) > 0:
			return true
		case name == kiln.EventPullRequest && wf.On.PullRequest != nil && len(wf.On.PullRequest.Paths) > 0:
			return true
		}
	}
	return false
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
