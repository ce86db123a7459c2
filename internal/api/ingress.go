package api

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/store"
)

// Delivery is a row of the event log: one webhook, trigger or dispatch and
// what kiln did with it.
type Delivery struct {
	ID          int64               `json:"id"`
	Source      string              `json:"source"` // the source's name ("" once removed)
	DeliveryID  string              `json:"delivery_id,omitempty"`
	Kind        string              `json:"kind,omitempty"` // github, gitea, generic, trigger, dispatch
	Event       string              `json:"event"`
	Status      kiln.DeliveryStatus `json:"status"`
	Message     string              `json:"message,omitempty"`
	RunIDs      []string            `json:"run_ids,omitempty"`
	Runs        []RunRef            `json:"runs,omitempty"` // with numbers, on single-delivery answers
	ReceivedAt  time.Time           `json:"received_at"`
	ProcessedAt *time.Time          `json:"processed_at,omitempty"`
	Attempts    int                 `json:"attempts"`
	Body        json.RawMessage     `json:"body,omitempty"` // GET /events/{id} only, when it is JSON
}

// RunRef names a run a delivery created.
type RunRef struct {
	ID     string `json:"id"`
	Number int64  `json:"number"`
}

// DeliveryList is a page of the event log, newest first.
type DeliveryList struct {
	Events     []Delivery `json:"events"`
	NextBefore int64      `json:"next_before,omitempty"`
}

// DispatchRequest starts a workflow by hand.
type DispatchRequest = ingress.DispatchRequest

// TriggerRequest tells kiln a local source's ref moved (kiln trigger, the
// post-receive hook). Every field is optional: no ref is the repository's
// HEAD branch, no sha what the ref names now.
type TriggerRequest struct {
	Ref    string `json:"ref,omitempty"`
	SHA    string `json:"sha,omitempty"`
	Before string `json:"before,omitempty"`
}

func deliveryDTO(d store.Delivery, names map[string]string) Delivery {
	return Delivery{
		ID: d.ID, Source: names[d.Source], DeliveryID: d.Headers["delivery"], Kind: d.Headers["kind"],
		Event: d.Event, Status: d.Status, Message: d.Message, RunIDs: d.RunIDs,
		ReceivedAt: d.ReceivedAt.UTC(), ProcessedAt: tp(d.ProcessedAt), Attempts: d.Attempts,
	}
}

func (s *server) dispatch(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "wait"); err != nil {
		return err
	}
	wait, err := queryBool(r, "wait")
	if err != nil {
		return err
	}
	var req DispatchRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(req.Source) == "":
		return errorf(codeInvalid, "name the source to dispatch on (field \"source\")")
	case strings.TrimSpace(req.Workflow) == "":
		return errorf(codeInvalid, "name the workflow to dispatch (field \"workflow\", e.g. deploy.yml)")
	case len(req.Workflow) > 255 || strings.ContainsAny(req.Workflow, "/\\\x00"):
		return errorf(codeInvalid, "workflow %.80q must be a file name in .kiln/workflows, like deploy.yml", req.Workflow)
	case len(req.Repository) > 255 || len(req.Ref) > 255:
		return errorf(codeInvalid, "repository and ref must each be at most 255 bytes")
	}
	req.Actor = actor(r)
	id, err := s.Ingress.Dispatch(r.Context(), req)
	if err != nil {
		return err
	}
	return s.answerDelivery(w, r, id, wait)
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{4,64}$`)

func (s *server) trigger(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "wait"); err != nil {
		return err
	}
	wait, err := queryBool(r, "wait")
	if err != nil {
		return err
	}
	var req TriggerRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if len(req.Ref) > 255 || strings.ContainsAny(req.Ref, " \t\n\x00") {
		return errorf(codeInvalid, "ref %.80q is not a branch or tag name", req.Ref)
	}
	for name, v := range map[string]string{"sha": req.SHA, "before": req.Before} {
		if v != "" && !hexRE.MatchString(v) {
			return errorf(codeInvalid, "%s %.80q is not a commit id (lower-case hexadecimal)", name, v)
		}
	}
	id, err := s.Ingress.Trigger(r.Context(), r.PathValue("name"), ingress.TriggerRequest{Ref: req.Ref, SHA: req.SHA, Before: req.Before})
	if err != nil {
		return err
	}
	return s.answerDelivery(w, r, id, wait)
}

// answerDelivery answers a recorded delivery: 202 with it as received, or,
// waiting, 200 with its outcome (202 if it is still not processed after
// MaxWait).
func (s *server) answerDelivery(w http.ResponseWriter, r *http.Request, id int64, wait bool) error {
	status := http.StatusAccepted
	var d store.Delivery
	var err error
	if wait {
		d, err = s.awaitDelivery(r.Context(), id)
		if d.Status != kiln.DeliveryReceived {
			status = http.StatusOK
		}
	} else {
		d, err = s.DB.Ingress().Get(r.Context(), id)
	}
	if err != nil {
		return err
	}
	dto, err := s.deliveryWithRuns(r.Context(), d)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/events/"+strconv.FormatInt(id, 10))
	writeJSON(w, status, dto)
	return nil
}

// awaitDelivery waits (at most MaxWait) for a delivery to be processed.
func (s *server) awaitDelivery(ctx context.Context, id int64) (store.Delivery, error) {
	done := s.Ingress.Wait(id) // before reading, so a finish in between is not missed
	d, err := s.DB.Ingress().Get(ctx, id)
	if err != nil || d.Status != kiln.DeliveryReceived {
		return d, err
	}
	timer := time.NewTimer(s.cfg.MaxWait)
	defer timer.Stop()
	select {
	case fin := <-done:
		return fin, nil
	case <-timer.C:
	case <-ctx.Done():
		return d, ctx.Err()
	}
	return s.DB.Ingress().Get(ctx, id)
}

func (s *server) deliveryWithRuns(ctx context.Context, d store.Delivery) (Delivery, error) {
	names, err := s.sourceNames(ctx)
	if err != nil {
		return Delivery{}, err
	}
	dto := deliveryDTO(d, names)
	for _, id := range d.RunIDs {
		// The run's row is all the answer needs: reading its jobs too
		// cost a dispatch of 256 jobs 9% of the server's CPU per job.
		run, err := s.DB.Runs().Header(ctx, id)
		if kiln.ErrorCode(err) == codeNotFound {
			continue
		}
		if err != nil {
			return dto, err
		}
		dto.Runs = append(dto.Runs, RunRef{ID: run.ID, Number: run.Number})
	}
	return dto, nil
}

func (s *server) listEvents(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "source", "status", "before", "limit"); err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.DeliveryFilter{Status: kiln.DeliveryStatus(q.Get("status"))}
	if f.Status != "" && !validDeliveryStatus(f.Status) {
		return errorf(codeInvalid, "status %q is not a delivery status (received, processed, duplicate, no_match, invalid_workflow, ignored, failed, ping)", f.Status)
	}
	if name := q.Get("source"); name != "" {
		src, err := s.DB.Sources().GetByName(r.Context(), name)
		if kiln.ErrorCode(err) == codeNotFound {
			return errorf(codeNotFound, "there is no source named %q", name)
		}
		if err != nil {
			return err
		}
		f.Source = src.ID
	}
	limit, err := queryInt(r, "limit", defaultRunLimit, 1, maxListLimit)
	if err != nil {
		return err
	}
	if f.Before, err = queryInt(r, "before", 0, 1, 1<<62); err != nil {
		return err
	}
	f.Limit = int(limit)
	ds, err := s.DB.Ingress().List(r.Context(), f)
	if err != nil {
		return err
	}
	names, err := s.sourceNames(r.Context())
	if err != nil {
		return err
	}
	out := DeliveryList{Events: make([]Delivery, len(ds))}
	for i, d := range ds {
		out.Events[i] = deliveryDTO(d, names)
	}
	if len(ds) == f.Limit && ds[len(ds)-1].ID > 1 {
		out.NextBefore = ds[len(ds)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func validDeliveryStatus(s kiln.DeliveryStatus) bool {
	switch s {
	case kiln.DeliveryReceived, kiln.DeliveryProcessed, kiln.DeliveryDuplicate, kiln.DeliveryNoMatch,
		kiln.DeliveryInvalidWorkflow, kiln.DeliveryIgnored, kiln.DeliveryFailed, kiln.DeliveryPing:
		return true
	}
	return false
}

func (s *server) getEvent(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return errorf(codeNotFound, "there is no event %.40q; events are numbered", raw)
	}
	d, err := s.DB.Ingress().Get(r.Context(), id)
	if kiln.ErrorCode(err) == codeNotFound {
		return errorf(codeNotFound, "there is no event %d", id)
	}
	if err != nil {
		return err
	}
	dto, err := s.deliveryWithRuns(r.Context(), d)
	if err != nil {
		return err
	}
	if json.Valid(d.Body) {
		dto.Body = d.Body
	}
	writeJSON(w, http.StatusOK, dto)
	return nil
}
