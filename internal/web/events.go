package web

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

type sourceRow struct {
	Name, Kind, Forks string
}

type eventsData struct {
	Source  string
	Sources []sourceRow
	Full    bool // admins see each source's kind and fork policy
	Events  []api.Delivery
	Older   string
}

// eventsPage lists the sources and their deliveries, newest first: what
// each started, or why it started nothing (B311). A read-only session sees
// the sources' names only, never their configuration.
func (s *site) eventsPage(w http.ResponseWriter, r *http.Request) error {
	sess := sessionOf(r)
	d := eventsData{Source: r.URL.Query().Get("source"), Full: sess.Token.Role == store.RoleAdmin}
	if d.Full {
		var srcs api.SourceList
		if err := s.call(r.Context(), sess.Token, "GET", "/api/v1/sources", nil, nil, &srcs); err != nil {
			return err
		}
		for _, src := range srcs.Sources {
			d.Sources = append(d.Sources, sourceRow{Name: src.Name, Kind: string(src.Kind), Forks: string(src.ForkPullRequests)})
		}
	} else {
		srcs, err := s.db.Sources().List(r.Context())
		if err != nil {
			return err
		}
		for _, src := range srcs {
			d.Sources = append(d.Sources, sourceRow{Name: src.Name})
		}
	}
	q := url.Values{"limit": {"50"}}
	if d.Source != "" {
		q.Set("source", d.Source)
	}
	if b := r.URL.Query().Get("before"); b != "" {
		q.Set("before", b)
	}
	var list api.DeliveryList
	if err := s.call(r.Context(), sess.Token, "GET", "/api/v1/events", q, nil, &list); err != nil {
		return err
	}
	d.Events = list.Events
	if list.NextBefore > 0 {
		next := url.Values{"before": {strconv.FormatInt(list.NextBefore, 10)}}
		if d.Source != "" {
			next.Set("source", d.Source)
		}
		d.Older = "/events?" + next.Encode()
	}
	s.renderFrame(w, r, http.StatusOK, "events", frame{Title: "Sources and events", Data: d})
	return nil
}
