package web

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
)

const runsPerPage = 50

type runFilters struct {
	Source, Workflow, Branch, Status, Event string
}

type runsData struct {
	F             runFilters
	Filtered      bool
	Statuses      []kiln.RunStatus
	Events        []kiln.EventName
	Runs          []api.Run
	Newest, Older string
}

// runsPage lists runs newest first, filtered and paged (B304).
func (s *site) runsPage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := runFilters{Source: q.Get("source"), Workflow: q.Get("workflow"), Branch: q.Get("branch"), Status: q.Get("status"), Event: q.Get("event")}
	v := url.Values{}
	for k, val := range map[string]string{"source": f.Source, "workflow": f.Workflow, "branch": f.Branch, "status": f.Status, "event": f.Event} {
		if val != "" {
			v.Set(k, val)
		}
	}
	filters := v.Encode()
	v.Set("limit", strconv.Itoa(runsPerPage))
	before := q.Get("before")
	if before != "" {
		v.Set("before", before)
	}
	var list api.RunList
	if err := s.call(r.Context(), sessionOf(r).Token, "GET", "/api/v1/runs", v, nil, &list); err != nil {
		return err
	}
	d := runsData{F: f, Filtered: filters != "", Statuses: kiln.RunStatuses, Events: kiln.EventNames, Runs: list.Runs}
	if before != "" {
		d.Newest = "/runs?" + filters
	}
	if list.NextBefore > 0 {
		next, _ := url.ParseQuery(filters)
		next.Set("before", strconv.FormatInt(list.NextBefore, 10))
		d.Older = "/runs?" + next.Encode()
	}
	s.renderFrame(w, r, http.StatusOK, "runs", frame{Title: "Runs", Data: d, Refresh: refreshIfLive(list.Runs)})
	return nil
}

// refreshIfLive refreshes a page listing unfinished runs every 10 seconds,
// so it stays current without JavaScript.
func refreshIfLive(runs []api.Run) int {
	for _, r := range runs {
		if !r.Status.Terminal() {
			return 10
		}
	}
	return 0
}
