package web

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// pages are the parsed templates: each page is templates/base.html with
// that page's file, so every page defines its own "content".
type pages struct {
	byName map[string]*template.Template
}

func loadPages() (*pages, error) {
	base, err := template.New("base.html").Funcs(funcs).ParseFS(assets, "templates/base.html", "templates/parts.html")
	if err != nil {
		return nil, fmt.Errorf("web: templates: %w", err)
	}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "base" || name == "parts" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(assets, n)
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", n, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// frame is what the layout reads around a page's own data.
type frame struct {
	Title   string
	Nav     string // the current section, for aria-current
	User    string // the token's name; "" before login
	Admin   bool   // the session may act (buttons are shown)
	CSRF    string
	Data    any
	Refresh int // seconds; a page about live things refreshes without JS
}

// render answers the page name with data inside the layout.
func (s *site) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	s.renderFrame(w, r, status, name, frame{Title: title, Data: data})
}

func (s *site) renderFrame(w http.ResponseWriter, r *http.Request, status int, name string, f frame) {
	t := s.pages.byName[name]
	if t == nil {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	if sess := sessionOf(r); sess.Token.ID != "" {
		f.User, f.Admin, f.CSRF = sess.Token.Name, sess.Token.Role == store.RoleAdmin, sess.CSRF
	}
	if f.Nav == "" {
		f.Nav = name
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "base", f); err != nil {
		s.log.Error("web: rendering a page failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error as a page with the status its code calls for.
func (s *site) fail(w http.ResponseWriter, r *http.Request, err error) {
	body := kiln.BodyOf(err)
	status := body.Error.Code.HTTPStatus()
	if body.Error.Code == kiln.CodeInternal {
		if r.Context().Err() == nil {
			s.log.Error("web: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		body.Error.Message = "something went wrong on the server; its log says what"
	}
	s.render(w, r, status, "error", http.StatusText(status), body.Error)
}

var funcs = template.FuncMap{
	"ago":   ago,
	"dur":   dur,
	"short": func(sha string) string { return sha[:min(len(sha), 10)] },
	"branch": func(ref string) string {
		return strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/tags/")
	},
	"time":     fmtAny,
	"join":     strings.Join,
	"statusOf": statusClass,
}

// fmtAny formats a time.Time or *time.Time ("" for none).
func fmtAny(v any) string {
	switch t := v.(type) {
	case time.Time:
		return fmtTime(&t)
	case *time.Time:
		return fmtTime(t)
	}
	return ""
}

func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago says how long ago t was, coarsely ("3m ago").
func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return roughly(time.Since(*t)) + " ago"
}

// dur is how long from start to end (now when end is nil).
func dur(start, end *time.Time) string {
	if start == nil || start.IsZero() {
		return ""
	}
	e := time.Now()
	if end != nil && !end.IsZero() {
		e = *end
	}
	return roughly(e.Sub(*start))
}

func roughly(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// statusClass is the CSS class of a run, job or step status.
func statusClass(s any) string {
	switch fmt.Sprint(s) {
	case "success", "processed":
		return "ok"
	case "failed", "failure", "timed_out", "timed_out_stale", "error", "invalid_workflow":
		return "bad"
	case "running", "dispatched", "cancelling", "processing":
		return "run"
	case "cancelled", "skipped", "ignored":
		return "off"
	}
	return "wait"
}
