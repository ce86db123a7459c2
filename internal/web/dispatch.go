package web

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"sort"
	"strconv"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/workflow"
)

// The dispatch page (B312) offers a form per workflow that declares
// `on: dispatch`, with a field per input typed as the workflow declares it
// (a select for a choice, a checkbox for a boolean, a number field),
// defaults filled in. kiln knows a workflow's inputs from the file of its
// latest run (runs keep their workflow file); a workflow never run yet is
// dispatched by name with the second form.

// dispatchable is a workflow offered for dispatch.
type dispatchable struct {
	Source   string
	File     string // ci.yml
	Name     string
	Inputs   []*workflow.Input
	FormName string // a unique id prefix for its fields
}

type dispatchData struct {
	Workflows []dispatchable
	Sources   []string
}

// runsScanned bounds how many recent runs the page reads to find the
// workflows and their latest files.
const runsScanned = 500

func (s *site) dispatchPage(w http.ResponseWriter, r *http.Request) error {
	d, err := s.dispatchables(r.Context())
	if err != nil {
		return err
	}
	s.renderFrame(w, r, http.StatusOK, "dispatch", frame{Title: "Dispatch", Data: d})
	return nil
}

func (s *site) dispatchables(ctx context.Context) (dispatchData, error) {
	var d dispatchData
	srcs, err := s.db.Sources().List(ctx)
	if err != nil {
		return d, err
	}
	names := map[string]string{}
	for _, src := range srcs {
		names[src.ID] = src.Name
		d.Sources = append(d.Sources, src.Name)
	}
	sort.Strings(d.Sources)
	runs, err := s.db.Runs().List(ctx, store.RunFilter{Limit: runsScanned})
	if err != nil {
		return d, err
	}
	seen := map[string]bool{}
	for _, run := range runs { // newest first: the first of each workflow is its latest file
		src := names[run.Source]
		key := src + "\x00" + run.WorkflowFile
		if src == "" || run.WorkflowHash == "" || seen[key] {
			continue
		}
		seen[key] = true
		content, err := s.db.Runs().WorkflowDefinition(ctx, run.WorkflowHash)
		if err != nil {
			continue
		}
		wf, err := workflow.Parse(run.WorkflowFile, content)
		if err != nil || wf.On.Dispatch == nil {
			continue
		}
		d.Workflows = append(d.Workflows, dispatchable{Source: src, File: path.Base(run.WorkflowFile), Name: run.Workflow,
			Inputs: wf.On.Dispatch.Inputs, FormName: fmt.Sprintf("w%d", len(d.Workflows))})
	}
	return d, nil
}

// dispatch starts a workflow with the form's inputs, typed as the
// workflow declares them, and shows the run it started.
func (s *site) dispatch(w http.ResponseWriter, r *http.Request) error {
	f := r.PostForm
	req := api.DispatchRequest{Source: f.Get("source"), Workflow: f.Get("workflow"), Ref: f.Get("ref")}
	if req.Source == "" || req.Workflow == "" {
		return kiln.Errorf(kiln.CodeInvalid, "choose a source and a workflow to dispatch")
	}
	d, err := s.dispatchables(r.Context())
	if err != nil {
		return err
	}
	for _, wf := range d.Workflows {
		if wf.Source != req.Source || wf.File != req.Workflow {
			continue
		}
		req.Inputs = map[string]any{}
		for _, in := range wf.Inputs {
			v, ok, err := formInput(in, f)
			if err != nil {
				return err
			}
			if ok {
				req.Inputs[in.Name] = v
			}
		}
	}
	var out api.Delivery
	q := map[string][]string{"wait": {"true"}}
	if err := s.call(r.Context(), sessionOf(r).Token, "POST", "/api/v1/dispatch", q, req, &out); err != nil {
		return err
	}
	if len(out.Runs) == 0 {
		if out.Message == "" {
			out.Message = string(out.Status)
		}
		return kiln.Errorf(kiln.CodeInvalid, "the dispatch started no run: %s", out.Message)
	}
	http.Redirect(w, r, fmt.Sprintf("/runs/%d", out.Runs[0].Number), http.StatusSeeOther)
	return nil
}

// formInput reads one declared input from the form: a checkbox is a
// boolean (absent is false), a number is parsed, an empty field is left to
// the workflow's default.
func formInput(in *workflow.Input, f map[string][]string) (any, bool, error) {
	vals := f["in."+in.Name]
	v := ""
	if len(vals) > 0 {
		v = vals[0]
	}
	switch in.Type {
	case workflow.InputBoolean:
		return v == "true", true, nil
	case workflow.InputNumber:
		if v == "" {
			return nil, false, nil
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, false, kiln.Errorf(kiln.CodeInvalid, "input %s: %q is not a number", in.Name, v)
		}
		return n, true, nil
	}
	if v == "" {
		return nil, false, nil
	}
	return v, true, nil
}
