package web

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

// A job's log page (B306, B307): one folded section per step (the
// checkout first), each showing a window of LogWindow lines with a link to
// the next; log.js fetches further windows as the reader scrolls and drops
// lines far above, so the page never holds the whole log. #s2-L120 is
// line 120 of step 2.

const checkoutStep = -1

type logLine struct {
	Step   int
	Seq    uint64
	Stream string
	HTML   template.HTML
}

type section struct {
	Step    int
	Name    string
	Status  string
	Took    string
	Open    bool
	Lines   []logLine
	Last    uint64
	More    bool
	Next    string // the URL of the next window (no JavaScript)
	Tail    string // the URL of the last window
	Earlier string // the URL of the previous window, in a one-step view
}

type logData struct {
	Run      api.Run
	Job      api.Job
	Sections []section
	Live     bool
	OneStep  bool
	Q        string
	Matches  []match
	Searched bool
	Base     string // /runs/N/jobs/ID
}

type match struct {
	Step int
	Name string
	Seq  uint64
	HTML template.HTML
	Href string
}

// findJob loads a run and one of its jobs, named by id or name.
func (s *site) findJob(ctx context.Context, tk store.AdminToken, runRef, jobRef string) (api.Run, api.Job, error) {
	var run api.Run
	if err := s.call(ctx, tk, "GET", "/api/v1/runs/"+url.PathEscape(runRef), nil, nil, &run); err != nil {
		return run, api.Job{}, err
	}
	for _, j := range run.Jobs {
		if j.ID == jobRef || j.Name == jobRef {
			return run, j, nil
		}
	}
	return run, api.Job{}, kiln.Errorf(kiln.CodeNotFound, "run #%d has no job %q", run.Number, jobRef)
}

// window reads up to n lines of a step after a seq, and whether more follow.
func (s *site) window(ctx context.Context, tk store.AdminToken, run api.Run, job api.Job, step int, after uint64, n int) ([]logLine, bool, error) {
	var out []logLine
	st := step
	err := s.client(tk).Logs(ctx, run.ID, api.LogQuery{Job: job.ID, Step: &st, After: after, Limit: n + 1}, func(l api.LogLine) error {
		if l.Attempt == job.Attempt {
			out = append(out, logLine{Step: l.Step, Seq: l.Seq, Stream: l.Stream, HTML: template.HTML(ansiHTML(l.Text))})
		}
		return nil
	})
	if len(out) > n {
		return out[:n], true, err
	}
	return out, false, err
}

func (s *site) logPage(w http.ResponseWriter, r *http.Request) error {
	tk := sessionOf(r).Token
	run, job, err := s.findJob(r.Context(), tk, r.PathValue("run"), r.PathValue("job"))
	if err != nil {
		return err
	}
	base := fmt.Sprintf("/runs/%d/jobs/%s", run.Number, url.PathEscape(job.ID))
	d := logData{Run: run, Job: job, Live: !job.Status.Terminal(), Base: base, Q: r.URL.Query().Get("q")}
	steps := []section{{Step: checkoutStep, Name: "checkout"}}
	for _, st := range job.Steps {
		steps = append(steps, section{Step: st.Index, Name: st.Name, Status: string(st.Status), Took: dur(st.StartedAt, st.FinishedAt),
			Open: st.Status == kiln.StepFailed || st.Status == kiln.StepRunning})
	}
	only, after, err := stepQuery(r)
	if err != nil {
		return err
	}
	if only != nil && r.URL.Query().Get("tail") == "1" {
		last, err := s.lastSeq(r.Context(), tk, run, job, *only)
		if err != nil {
			return err
		}
		after = last - min(last, uint64(s.cfg.LogWindow))
	}
	d.OneStep = only != nil
	for _, sec := range steps {
		if only != nil && *only != sec.Step {
			continue
		}
		from := uint64(0)
		if only != nil {
			from, sec.Open = after, true
			if after > 0 {
				sec.Earlier = fmt.Sprintf("%s?step=%d&after=%d", base, sec.Step, after-min(after, uint64(s.cfg.LogWindow)))
			}
		}
		sec.Lines, sec.More, err = s.window(r.Context(), tk, run, job, sec.Step, from, s.cfg.LogWindow)
		if err != nil {
			return err
		}
		sec.Last = from
		if n := len(sec.Lines); n > 0 {
			sec.Last = sec.Lines[n-1].Seq
		}
		if sec.More {
			sec.Next = fmt.Sprintf("%s?step=%d&after=%d#s%d-L%d", base, sec.Step, sec.Last, sec.Step, sec.Last+1)
			sec.Tail = fmt.Sprintf("%s?step=%d&tail=1#step%d-end", base, sec.Step, sec.Step)
		}
		d.Sections = append(d.Sections, sec)
	}
	if d.Q != "" {
		d.Searched = true
		if d.Matches, err = s.search(r.Context(), tk, run, job, steps, d.Q, base); err != nil {
			return err
		}
	}
	s.renderFrame(w, r, http.StatusOK, "log", frame{Title: fmt.Sprintf("%s · run #%d", job.Name, run.Number), Nav: "log", Data: d})
	return nil
}

// lastSeq finds the last line of a step (for "Last lines") with a few
// one-line reads: doubling to pass the end, then halving back to it.
func (s *site) lastSeq(ctx context.Context, tk store.AdminToken, run api.Run, job api.Job, step int) (uint64, error) {
	exists := func(seq uint64) (bool, error) {
		lines, _, err := s.window(ctx, tk, run, job, step, seq-1, 1)
		return len(lines) > 0, err
	}
	lo, hi := uint64(0), uint64(1) // a line after lo exists; none at or after hi
	for {
		ok, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
		if hi > 1<<40 {
			return lo, nil
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// stepQuery reads ?step=S&after=A (a one-step window).
func stepQuery(r *http.Request) (*int, uint64, error) {
	q := r.URL.Query()
	if !q.Has("step") {
		return nil, 0, nil
	}
	n, err := strconv.Atoi(q.Get("step"))
	if err != nil || n < checkoutStep || n > 100000 {
		return nil, 0, kiln.Errorf(kiln.CodeInvalid, "step %q is not a step number", q.Get("step"))
	}
	var after uint64
	if a := q.Get("after"); a != "" {
		if after, err = strconv.ParseUint(a, 10, 62); err != nil {
			return nil, 0, kiln.Errorf(kiln.CodeInvalid, "after %q is not a line number", a)
		}
	}
	return &n, after, nil
}

// logLines answers the next window of a step as HTML list items, for
// log.js; X-Kiln-Last is the last seq sent and X-Kiln-More whether more
// lines follow.
func (s *site) logLines(w http.ResponseWriter, r *http.Request) error {
	tk := sessionOf(r).Token
	run, job, err := s.findJob(r.Context(), tk, r.PathValue("run"), r.PathValue("job"))
	if err != nil {
		return err
	}
	step, after, err := stepQuery(r)
	if err != nil || step == nil {
		return kiln.Errorf(kiln.CodeInvalid, "give step and after")
	}
	lines, more, err := s.window(r.Context(), tk, run, job, *step, after, s.cfg.LogWindow)
	if err != nil {
		return err
	}
	last := after
	if n := len(lines); n > 0 {
		last = lines[n-1].Seq
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Kiln-Last", strconv.FormatUint(last, 10))
	w.Header().Set("X-Kiln-More", strconv.FormatBool(more))
	return s.pages.byName["log"].ExecuteTemplate(w, "lines", lines)
}

// logRaw answers the job's whole log as plain text, step by step.
func (s *site) logRaw(w http.ResponseWriter, r *http.Request) error {
	tk := sessionOf(r).Token
	run, job, err := s.findJob(r.Context(), tk, r.PathValue("run"), r.PathValue("job"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="run-%d-%s.log"`, run.Number, safeFile(job.Name)))
	step := -2
	return s.client(tk).Logs(r.Context(), run.ID, api.LogQuery{Job: job.ID, Limit: 100000}, func(l api.LogLine) error {
		if l.Attempt != job.Attempt {
			return nil
		}
		if l.Step != step {
			step = l.Step
			if _, err := fmt.Fprintf(w, "## %s\n", l.StepName); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintln(w, l.Text)
		return err
	})
}

func safeFile(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, name)
}

// maxMatches bounds a search's results.
const maxMatches = 200

// search finds the lines of the job's log containing q (case-insensitive).
func (s *site) search(ctx context.Context, tk store.AdminToken, run api.Run, job api.Job, steps []section, q, base string) ([]match, error) {
	names := map[int]string{}
	for _, st := range steps {
		names[st.Step] = st.Name
	}
	needle := strings.ToLower(q)
	var out []match
	err := s.client(tk).Logs(ctx, run.ID, api.LogQuery{Job: job.ID, Limit: 100000}, func(l api.LogLine) error {
		if l.Attempt != job.Attempt || len(out) >= maxMatches || !strings.Contains(strings.ToLower(l.Text), needle) {
			return nil
		}
		out = append(out, match{Step: l.Step, Name: names[l.Step], Seq: l.Seq, HTML: template.HTML(ansiHTML(l.Text)),
			Href: fmt.Sprintf("%s?step=%d&after=%d#s%d-L%d", base, l.Step, l.Seq-1, l.Step, l.Seq)})
		return nil
	})
	return out, err
}
