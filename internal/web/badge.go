package web

import (
	"fmt"
	"html"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// badge serves /badge/{source}/{workflow}.svg[?branch=B] (B314): the state
// of the workflow's latest run (on branch B, else on any ref) as an SVG
// image anyone may fetch — but only for a source marked public_badges
// (kiln sources update NAME --public-badges). Any other source, and one
// that does not exist, is answered 404 alike, so a badge URL tells a
// stranger nothing about what kiln builds privately. {workflow} is the
// workflow's name (its `name:`, as the runs list shows it).
func (s *site) badge(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutSuffix(r.PathValue("file"), ".svg")
	source := r.PathValue("source")
	if !ok || !badgeName(name, 200) || !badgeName(source, 200) {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	branch := q.Get("branch")
	if len(q) > 1 || (len(q) == 1 && !q.Has("branch")) || len(q["branch"]) > 1 || (q.Has("branch") && !validBranch(branch)) {
		http.Error(w, "a badge takes one query parameter, ?branch=NAME, a branch name (at most 255 characters; no spaces, control characters or \"..\")", http.StatusBadRequest)
		return
	}
	src, err := s.db.Sources().GetByName(r.Context(), source)
	if kiln.ErrorCode(err) == kiln.CodeNotFound || (err == nil && !src.PublicBadges) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		s.log.Error("web: badge: reading the source failed", "source", source, "err", err)
		http.Error(w, "the database is unavailable; try again", http.StatusServiceUnavailable)
		return
	}
	f := store.RunFilter{Source: src.ID, Workflow: name, Limit: 1}
	if branch != "" {
		f.Ref = "refs/heads/" + branch
	}
	runs, err := s.db.Runs().List(r.Context(), f)
	if err != nil {
		s.log.Error("web: badge: reading the latest run failed", "source", source, "workflow", name, "err", err)
		http.Error(w, "the database is unavailable; try again", http.StatusServiceUnavailable)
		return
	}
	state := "no runs"
	if len(runs) > 0 {
		state = badgeState(runs[0].Status)
	}
	w.Header().Set("Content-Type", "image/svg+xml; charset=utf-8")
	// Forges' image proxies cache badges; a minute keeps them close to true.
	w.Header().Set("Cache-Control", "max-age=60, public")
	_, _ = w.Write([]byte(badgeSVG(name, state)))
}

// badgeState is what a badge says of a run's status.
func badgeState(st kiln.RunStatus) string {
	switch st {
	case kiln.RunSuccess:
		return "passing"
	case kiln.RunFailed:
		return "failing"
	case kiln.RunCancelled:
		return "cancelled"
	}
	return "running" // pending, running, cancelling
}

var badgeColours = map[string]string{"passing": "#1a7f37", "failing": "#cf222e", "running": "#9a6700", "cancelled": "#57606a", "no runs": "#57606a"}

// badgeSVG draws a two-part badge: the workflow's name on grey, its state
// on the state's colour (white text: every colour has at least 4.5:1).
// Widths are estimated (about 7 px a character of 11 px Verdana).
func badgeSVG(label, state string) string {
	lw, sw := 10+7*utf8.RuneCountInString(label), 10+7*utf8.RuneCountInString(state)
	l, st := html.EscapeString(label), html.EscapeString(state)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="20" role="img" aria-label="%s: %s">`, lw+sw, l, st)
	fmt.Fprintf(&b, `<title>%s: %s</title>`, l, st)
	fmt.Fprintf(&b, `<rect width="%d" height="20" rx="3" fill="#424a53"/><rect x="%d" width="%d" height="20" rx="3" fill="%s"/>`, lw+sw, lw, sw, badgeColours[state])
	fmt.Fprintf(&b, `<g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle">`)
	fmt.Fprintf(&b, `<text x="%d" y="14">%s</text><text x="%d" y="14">%s</text></g></svg>`, lw/2, l, lw+sw/2, st)
	return b.String()
}

// badgeName accepts a source or workflow name of at most max bytes of
// printable text.
func badgeName(s string, max int) bool {
	if s == "" || len(s) > max || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// validBranch applies the rules of git check-ref-format a badge needs: a
// bounded, printable name without spaces, "..", "@{", a leading "-" or
// "/", or the characters git forbids.
func validBranch(b string) bool {
	if b == "" || len(b) > 255 || !utf8.ValidString(b) || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".") || strings.HasSuffix(b, ".lock") || strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//") {
		return false
	}
	for _, r := range b {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("~^:?*[\\", r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
