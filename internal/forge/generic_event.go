package forge

import (
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/kilnci/kiln"
)

// GenericPayload is the JSON body of a generic webhook. Every field is
// optional; unknown fields are ignored, so a sender can forward a richer
// payload of its own.
type GenericPayload struct {
	// Event is push or dispatch when the X-Event-Type header is absent.
	Event string `json:"event,omitempty"`
	// Ref is a branch or tag: "main", "refs/heads/main", "refs/tags/v1".
	// Default: the source's default branch.
	Ref string `json:"ref,omitempty"`
	// SHA is the commit to run; when absent kiln resolves Ref.
	SHA string `json:"sha,omitempty"`
	// Before is the previous commit of the branch, for path filters.
	Before  string `json:"before,omitempty"`
	Actor   string `json:"actor,omitempty"`
	Message string `json:"message,omitempty"`
	// ChangedFiles, when present (even empty), is taken as the complete
	// list of changed files.
	ChangedFiles []string `json:"changed_files,omitempty"`
	// Workflow limits a dispatch to one workflow file ("ci.yml").
	Workflow string `json:"workflow,omitempty"`
	// Inputs are a dispatch's inputs, checked against the workflow's
	// declared inputs when the run is created.
	Inputs map[string]any `json:"inputs,omitempty"`
}

// GenericTrigger is what a generic delivery asks for.
type GenericTrigger struct {
	Event    *kiln.Event
	Workflow string         // dispatch: .kiln/workflows/<name>, or "" for every workflow
	Inputs   map[string]any // dispatch inputs
}

// Bounds on what a generic payload may carry.
const (
	maxActor     = 200
	maxMessage   = 64 << 10
	maxInputs    = 100
	maxPathBytes = 4096
)

// GenericEvent turns a verified generic delivery into an event on the
// source's repository: a push (a tag when the ref is refs/tags/…) or a
// dispatch. When the payload has no sha, Event.SHA is empty and the
// server resolves Event.Ref with Repo.Resolve.
func GenericEvent(src *Source, d *Delivery) (*GenericTrigger, error) {
	if src.Kind != kiln.SourceGeneric || src.Generic == nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "source %s is not a generic source", src.Name)
	}
	var p GenericPayload
	if err := json.Unmarshal(d.Body, &p); err != nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "the body is not a JSON object of the generic webhook format: %s", jsonProblem(err))
	}
	cfg := src.Generic
	ev := &kiln.Event{Repository: cfg.Repository, CloneURL: cfg.CloneURL, DefaultBranch: cfg.DefaultBranch}
	ref := cmpOr(p.Ref, cfg.DefaultBranch)
	if ref == "" {
		return nil, kiln.Errorf(kiln.CodeInvalid, "ref is missing and source %s has no default_branch", src.Name)
	}
	if !validRefName(ref) {
		return nil, kiln.Errorf(kiln.CodeInvalid, "ref %q is not a valid branch or tag name", ref)
	}
	switch {
	case strings.HasPrefix(ref, "refs/heads/"):
		ev.Ref, ev.Branch = ref, strings.TrimPrefix(ref, "refs/heads/")
	case strings.HasPrefix(ref, "refs/tags/"):
		ev.Ref, ev.Tag = ref, strings.TrimPrefix(ref, "refs/tags/")
	case strings.HasPrefix(ref, "refs/"):
		return nil, kiln.Errorf(kiln.CodeInvalid, "ref %q is not a branch (refs/heads/…) or a tag (refs/tags/…)", ref)
	default:
		ev.Ref, ev.Branch = "refs/heads/"+ref, ref
	}
	switch d.Event {
	case "push":
		ev.Name = kiln.EventPush
		if ev.Tag != "" {
			ev.Name = kiln.EventTag
		}
	case "dispatch":
		ev.Name = kiln.EventDispatch
	default:
		return nil, kiln.Errorf(kiln.CodeInvalid, "event type %q is not one a generic source takes (push or dispatch)", d.Event)
	}
	for _, c := range []struct{ name, v string }{{"sha", p.SHA}, {"before", p.Before}} {
		if c.v != "" && checkSHA(c.v) != nil {
			return nil, kiln.Errorf(kiln.CodeInvalid, "%s %q is not a hexadecimal commit id", c.name, c.v)
		}
	}
	ev.SHA, ev.Before = p.SHA, p.Before
	ev.Actor = clip(p.Actor, maxActor)
	ev.Message = clip(p.Message, maxMessage)
	if err := setChangedFiles(ev, p.ChangedFiles); err != nil {
		return nil, err
	}
	t := &GenericTrigger{Event: ev}
	if ev.Name != kiln.EventDispatch {
		if p.Workflow != "" || len(p.Inputs) > 0 {
			return nil, kiln.Errorf(kiln.CodeInvalid, "workflow and inputs belong to dispatch events, not %s", d.Event)
		}
		return t, nil
	}
	if p.Workflow != "" {
		name := strings.TrimPrefix(p.Workflow, WorkflowDir+"/")
		if strings.Contains(name, "/") || !isWorkflowFile(name) {
			return nil, kiln.Errorf(kiln.CodeInvalid, "workflow %q is not a file name in %s ending in .yml or .yaml", p.Workflow, WorkflowDir)
		}
		t.Workflow = WorkflowDir + "/" + name
	}
	if len(p.Inputs) > maxInputs {
		return nil, kiln.Errorf(kiln.CodeInvalid, "a dispatch takes at most %d inputs", maxInputs)
	}
	t.Inputs = p.Inputs
	return t, nil
}

// setChangedFiles takes a payload's list as complete, unless it is too
// long to be trusted as such.
func setChangedFiles(ev *kiln.Event, files []string) error {
	if files == nil {
		return nil
	}
	if len(files) > MaxChangedFiles {
		ev.ChangedFilesStatus = kiln.ChangedFilesUnavailable
		return nil
	}
	for _, f := range files {
		if f == "" || len(f) > maxPathBytes || strings.ContainsRune(f, 0) || !utf8.ValidString(f) {
			return kiln.Errorf(kiln.CodeInvalid, "changed_files holds an empty, overlong or invalid path")
		}
	}
	ev.ChangedFiles, ev.ChangedFilesStatus = files, kiln.ChangedFilesFetched
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return "field " + te.Field + " must be a " + te.Type.String()
	}
	return "it must be an object"
}
