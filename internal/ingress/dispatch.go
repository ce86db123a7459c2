package ingress

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// DispatchRequest starts a workflow by hand (API, CLI, dashboard).
type DispatchRequest struct {
	Source     string         `json:"source"`               // source name
	Repository string         `json:"repository,omitempty"` // owner/name; default: the source's repository
	Workflow   string         `json:"workflow"`             // file name, e.g. deploy.yml, or its base name
	Ref        string         `json:"ref,omitempty"`        // branch or tag; default: the default branch
	Inputs     map[string]any `json:"inputs,omitempty"`
	Actor      string         `json:"-"` // set by the API from the token, never taken from a request
}

// TriggerRequest is a push to a local source (kiln trigger, the hook).
type TriggerRequest = forge.LocalPush

// storedDispatch is a dispatch as its delivery keeps it: the request, and
// the actor the API vouched for (which the request's JSON never carries).
type storedDispatch struct {
	DispatchRequest
	Actor string `json:"actor,omitempty"`
}

// Dispatch records a manual dispatch as a delivery and hands it to the
// workers; the caller can Wait for its outcome.
func (p *Processor) Dispatch(ctx context.Context, r DispatchRequest) (int64, error) {
	if strings.TrimSpace(r.Workflow) == "" {
		return 0, kiln.Errorf(kiln.CodeInvalid, "name the workflow to dispatch (e.g. deploy.yml)")
	}
	return p.record(ctx, r.Source, kindDispatch, "dispatch", storedDispatch{DispatchRequest: r, Actor: r.Actor})
}

// Trigger records a push to a local source as a delivery.
func (p *Processor) Trigger(ctx context.Context, source string, push TriggerRequest) (int64, error) {
	return p.record(ctx, source, kindTrigger, "push", push)
}

func (p *Processor) record(ctx context.Context, source, kind, event string, body any) (int64, error) {
	st, fs, err := p.sources.ByName(ctx, source)
	if err != nil {
		return 0, err
	}
	if fs == nil {
		return 0, kiln.Errorf(kiln.CodeNotFound, "there is no source named %q", source)
	}
	if kind == kindTrigger && fs.Kind != kiln.SourceLocal {
		return 0, kiln.Errorf(kiln.CodeInvalid, "source %s is a %s source; kiln trigger works on local sources", source, fs.Kind)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	nd := store.NewDelivery{
		Source: st.ID, Event: event, Body: raw, Headers: map[string]string{headerKind: kind},
		Owner: p.owner, ClaimFor: p.cfg.ClaimLease,
	}
	id, _, err := p.db.Ingress().Record(ctx, nd)
	if err != nil {
		return 0, err
	}
	p.recorded(st.Name, event, false)
	p.notify(id, nd)
	return id, nil
}

// dispatchEvent builds the event of a manual dispatch on a source's
// repository: the ref resolved later, the clone URL from the source.
func dispatchEvent(ctx context.Context, fs *forge.Source, repo forge.Repo, r DispatchRequest) (*kiln.Event, error) {
	ev := &kiln.Event{Name: kiln.EventDispatch, Repository: r.Repository, Actor: r.Actor}
	switch fs.Kind {
	case kiln.SourceGeneric:
		if ev.Repository == "" {
			ev.Repository = fs.Generic.Repository
		}
		ev.DefaultBranch = fs.Generic.DefaultBranch
	case kiln.SourceLocal:
		// The repository knows its default branch: a dispatch without a
		// ref runs on it, like a push of it would.
		push, err := forge.LocalEvent(ctx, fs, forge.LocalPush{Ref: r.Ref}, forge.Options{})
		if err != nil {
			return nil, permanent{err}
		}
		push.Name, push.Actor, push.ChangedFiles, push.ChangedFilesStatus = kiln.EventDispatch, r.Actor, nil, ""
		if r.Repository != "" {
			push.Repository = r.Repository
		}
		return push, nil
	}
	if ev.Repository == "" {
		return nil, permanent{kiln.Errorf(kiln.CodeInvalid, "name the repository (owner/name) to dispatch on source %s", fs.Name)}
	}
	ref := r.Ref
	if ref == "" {
		ref = ev.DefaultBranch
	}
	if ref == "" {
		ref = "HEAD"
	}
	switch {
	case strings.HasPrefix(ref, "refs/tags/"):
		ev.Ref, ev.Tag = ref, strings.TrimPrefix(ref, "refs/tags/")
	case strings.HasPrefix(ref, "refs/heads/"):
		ev.Ref, ev.Branch = ref, strings.TrimPrefix(ref, "refs/heads/")
	case ref == "HEAD":
		ev.Ref = ref
	default:
		ev.Ref, ev.Branch = "refs/heads/"+ref, ref
	}
	if ci, err := repo.Clone(ctx, ev.Repository); err == nil {
		ev.CloneURL = ci.URL
	}
	return ev, nil
}
