package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

// A running run's page holds one server-sent-event connection
// (/runs/N/live) that brings its job states, status and timeline as they
// change (B318). The server fans out: however many pages watch a run, one
// watcher per run on this server reads the run's fingerprint
// (store.Runs.Fingerprint, one small query) every LiveInterval and the run
// itself only when that changed, renders the job rows and timeline items
// once with the page's own templates, and keeps the result as an immutable
// snapshot. Each page's connection sends what differs between the last
// snapshot it sent and the newest: a page that fell behind, or that
// reconnects, skips straight to the present (a reconnect starts from
// nothing, so it gets everything), and no page ever holds up another or
// the watcher. Reading the database, not this server's events, means a
// change made through any server of the cluster shows.

// liveReader is the identity the watchers read runs as: read-only, and
// never a token's (each page's session was checked when it connected, and
// is checked again while it stays).
var liveReader = store.AdminToken{ID: "dashboard-live", Name: "dashboard live view", Role: store.RoleReadOnly}

// runSnap is what a run's page shows that changes, rendered.
type runSnap struct {
	Status   string // the status badge's HTML
	Ended    bool
	Jobs     []jobSnap
	Timeline []string // each item's HTML, oldest first
}

type jobSnap struct {
	ID    string `json:"id"`
	Class string `json:"cls"`   // the graph node's status class
	Title string `json:"title"` // the graph node's tooltip
	Row   string `json:"row"`   // the table row's cells
}

// runUpdate is one message to a page: what changed since the last one.
type runUpdate struct {
	Status       string    `json:"status,omitempty"`
	Jobs         []jobSnap `json:"jobs,omitempty"`
	TimelineFrom int       `json:"timeline_from"`
	Timeline     []string  `json:"timeline,omitempty"`
	End          bool      `json:"end,omitempty"`
}

// diff is what a page holding prev must be sent to show next.
func diff(prev, next *runSnap) runUpdate {
	if prev == nil {
		prev = &runSnap{}
	}
	u := runUpdate{End: next.Ended}
	if next.Status != prev.Status {
		u.Status = next.Status
	}
	old := make(map[string]string, len(prev.Jobs))
	for _, j := range prev.Jobs {
		old[j.ID] = j.Row
	}
	for _, j := range next.Jobs {
		if row, ok := old[j.ID]; !ok || row != j.Row {
			u.Jobs = append(u.Jobs, j)
		}
	}
	if len(next.Timeline) < len(prev.Timeline) {
		u.Timeline = next.Timeline // cannot happen (append-only), but stay right
	} else {
		u.TimelineFrom, u.Timeline = len(prev.Timeline), next.Timeline[len(prev.Timeline):]
	}
	return u
}

func (u runUpdate) empty() bool {
	return u.Status == "" && len(u.Jobs) == 0 && len(u.Timeline) == 0 && !u.End
}

// runHub holds this server's run watchers.
type runHub struct {
	s       *site
	mu      sync.Mutex
	watches map[string]*runWatch // by run id
}

type runWatch struct {
	id     string
	subs   map[chan struct{}]struct{}
	snap   *runSnap // guarded by the hub's mu
	cancel context.CancelFunc
}

// subscribe adds a page to the run's watcher, starting it for the first
// page; the channel is signalled (never blocking, at most one pending)
// when a newer snapshot is there. done removes the page, and stops the
// watcher with the last.
func (h *runHub) subscribe(runID string) (ch chan struct{}, latest func() *runSnap, done func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.watches[runID]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &runWatch{id: runID, subs: map[chan struct{}]struct{}{}, cancel: cancel}
		h.watches[runID] = w
		go h.watch(ctx, w)
	}
	ch = make(chan struct{}, 1)
	w.subs[ch] = struct{}{}
	if w.snap != nil {
		ch <- struct{}{}
	}
	latest = func() *runSnap {
		h.mu.Lock()
		defer h.mu.Unlock()
		return w.snap
	}
	done = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(w.subs, ch)
		if len(w.subs) == 0 && h.watches[runID] == w {
			delete(h.watches, runID)
			w.cancel()
		}
	}
	return ch, latest, done
}

// watch reads the run while pages watch it.
func (h *runHub) watch(ctx context.Context, w *runWatch) {
	tick := time.NewTicker(h.s.cfg.LiveInterval)
	defer tick.Stop()
	last := ""
	for {
		fp, err := h.s.db.Runs().Fingerprint(ctx, w.id)
		if err == nil && fp != last {
			var snap *runSnap
			if snap, err = h.s.runSnapshot(ctx, w.id); err == nil {
				last = fp
				h.mu.Lock()
				w.snap = snap
				for ch := range w.subs {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
				h.mu.Unlock()
			}
		}
		if err != nil && ctx.Err() == nil {
			h.s.log.Warn("web: reading a watched run failed", "run", w.id, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runSnapshot reads and renders what a run's page shows that changes.
func (s *site) runSnapshot(ctx context.Context, runID string) (*runSnap, error) {
	var run api.Run
	if err := s.call(ctx, liveReader, "GET", "/api/v1/runs/"+url.PathEscape(runID), nil, nil, &run); err != nil {
		return nil, err
	}
	var tl api.Timeline
	if err := s.call(ctx, liveReader, "GET", "/api/v1/runs/"+url.PathEscape(runID)+"/timeline", nil, nil, &tl); err != nil {
		return nil, err
	}
	t := s.pages.byName["run"]
	var b bytes.Buffer
	render := func(name string, data any) (string, error) {
		b.Reset()
		err := t.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	snap := &runSnap{Ended: run.Status.Terminal(), Jobs: make([]jobSnap, 0, len(run.Jobs)), Timeline: make([]string, 0, len(tl.Events))}
	var err error
	if snap.Status, err = render("status", run.Status); err != nil {
		return nil, err
	}
	for _, row := range jobRows(run) {
		html, err := render("jobrow", row)
		if err != nil {
			return nil, err
		}
		snap.Jobs = append(snap.Jobs, jobSnap{ID: row.ID, Class: statusClass(row.Status), Title: row.Name + ": " + string(row.Status), Row: html})
	}
	for _, ev := range tl.Events {
		html, err := render("tlitem", ev)
		if err != nil {
			return nil, err
		}
		snap.Timeline = append(snap.Timeline, html)
	}
	return snap, nil
}

// runLive is a run page's live connection. The run is read as the
// session first (so a session may watch only what it may read); the
// session is checked again at every keepalive, so a revoked token's page
// stops following within FollowKeepalive.
func (s *site) runLive(w http.ResponseWriter, r *http.Request) error {
	tk := sessionOf(r).Token
	var run api.Run
	if err := s.call(r.Context(), tk, "GET", "/api/v1/runs/"+url.PathEscape(r.PathValue("run")), nil, nil, &run); err != nil {
		return err
	}
	key := "run:" + run.ID
	if !s.addViewer(key) {
		w.Header().Set("Retry-After", "30")
		return kiln.Errorf(kiln.CodeUnavailable, "too many pages follow this run on this server; reload later")
	}
	defer s.dropViewer(key)
	ch, latest, done := s.live.subscribe(run.ID)
	defer done()

	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("retry: 1000\n\n"))
	_ = rc.Flush()

	ping := time.NewTicker(s.cfg.FollowKeepalive)
	defer ping.Stop()
	var sent *runSnap
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-ping.C:
			if !s.stillLoggedIn(r) {
				return nil
			}
			_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := w.Write([]byte(": keepalive\n\n")); err != nil || rc.Flush() != nil {
				return nil
			}
		case <-ch:
			next := latest()
			if next == nil || next == sent {
				continue
			}
			u := diff(sent, next)
			sent = next
			if u.empty() {
				continue
			}
			data, err := json.Marshal(u)
			if err != nil {
				return nil
			}
			_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := w.Write([]byte("event: update\ndata: " + string(data) + "\n\n")); err != nil || rc.Flush() != nil {
				return nil
			}
			if u.End {
				return nil
			}
		}
	}
}

// stillLoggedIn reports whether the request's session is still valid (its
// token not revoked, its time not over). A database error counts as yes:
// the next check decides.
func (s *site) stillLoggedIn(r *http.Request) bool {
	c, err := r.Cookie(s.cookieName())
	if err != nil {
		return false
	}
	_, err = s.db.Sessions().Get(r.Context(), c.Value)
	return err == nil || kiln.ErrorCode(err) != kiln.CodeUnauthorized
}
