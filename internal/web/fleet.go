package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/kilnci/kiln/internal/api"
)

// queueGroup is the waiting jobs asking for one label set.
type queueGroup struct {
	Labels string
	Jobs   []api.WaitingJob
}

type queueData struct {
	Depth  map[string]int
	Groups []queueGroup
}

// queuePage lists every waiting job with its pending reason and since
// when, grouped by the labels it asks for (B309).
func (s *site) queuePage(w http.ResponseWriter, r *http.Request) error {
	var q api.Queue
	if err := s.call(r.Context(), sessionOf(r).Token, "GET", "/api/v1/queue", url.Values{"limit": {"1000"}}, nil, &q); err != nil {
		return err
	}
	d := queueData{Depth: map[string]int{}}
	for st, n := range q.Depth {
		d.Depth[string(st)] = n
	}
	idx := map[string]int{}
	for _, j := range q.Waiting {
		key := strings.Join(j.RunsOn, ", ")
		if len(j.ExcludeLabels) > 0 {
			key += " (not " + strings.Join(j.ExcludeLabels, ", ") + ")"
		}
		i, ok := idx[key]
		if !ok {
			i = len(d.Groups)
			idx[key] = i
			d.Groups = append(d.Groups, queueGroup{Labels: key})
		}
		d.Groups[i].Jobs = append(d.Groups[i].Jobs, j)
	}
	slices.SortStableFunc(d.Groups, func(a, b queueGroup) int { return strings.Compare(a.Labels, b.Labels) })
	s.renderFrame(w, r, http.StatusOK, "queue", frame{Title: "Queue", Data: d, Refresh: 10})
	return nil
}

// agentsPage lists the agents (B310): labels, state, jobs, heartbeat
// age, version; admins may drain one.
func (s *site) agentsPage(w http.ResponseWriter, r *http.Request) error {
	var list api.AgentList
	if err := s.call(r.Context(), sessionOf(r).Token, "GET", "/api/v1/agents", nil, nil, &list); err != nil {
		return err
	}
	s.renderFrame(w, r, http.StatusOK, "agents", frame{Title: "Agents", Data: list.Agents, Refresh: 10})
	return nil
}

func (s *site) drainAgent(w http.ResponseWriter, r *http.Request) error {
	if err := s.call(r.Context(), sessionOf(r).Token, "POST", "/api/v1/agents/"+url.PathEscape(r.PathValue("id"))+"/drain", nil, nil, nil); err != nil {
		return err
	}
	http.Redirect(w, r, "/agents", http.StatusSeeOther)
	return nil
}

// scalersPage shows each scaler's capacity, spawns in flight, warm pool
// and recent failures.
func (s *site) scalersPage(w http.ResponseWriter, r *http.Request) error {
	var list api.ScalerList
	if err := s.call(r.Context(), sessionOf(r).Token, "GET", "/api/v1/scalers", nil, nil, &list); err != nil {
		return err
	}
	s.renderFrame(w, r, http.StatusOK, "scalers", frame{Title: "Scalers", Data: list.Scalers, Refresh: 10})
	return nil
}
