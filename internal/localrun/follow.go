package localrun

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store"
)

// pollInterval is how often kiln run looks at the runs and their logs: the
// store is local, so polling is cheap and keeps the printer simple.
const pollInterval = 100 * time.Millisecond

// follower prints the progress of runs: job status changes, each step as it
// starts and ends, and every log line, prefixed by the job.
type follower struct {
	s       *server.Server
	ids     []string
	out     io.Writer
	jobs    map[string]*jobView
	style   style
	safe    func(string) string // makes text from the workflow and its steps safe to print
	verbose bool                // the checkout's every line, not its summary
}

type jobView struct {
	status     kiln.JobStatus
	reason     string
	reasonSeen int // polls the job has been queued for this reason
	epoch      int64
	steps      map[int]kiln.StepStatus
	headed     map[int]bool // steps whose ▶ header is printed
	// announced: the "running on" line of this attempt is printed.
	announced bool
	seqs      map[int]uint64
	// The checkout's lines wait here until it is known whether it failed:
	// a checkout that worked prints one line, one that failed all of them.
	checkout     []string
	checkoutDone bool
}

func newFollower(s *server.Server, ids []string, o Options) *follower {
	safe := o.Safe
	if safe == nil {
		safe = func(s string) string { return s }
	}
	out := o.Out
	if o.JSON {
		out = o.Err // stdout is the JSON result's
	}
	return &follower{s: s, ids: ids, out: out, jobs: map[string]*jobView{}, style: style{on: o.Colour}, safe: safe, verbose: o.Verbose}
}

func newJobView(epoch int64) *jobView {
	return &jobView{epoch: epoch, steps: map[int]kiln.StepStatus{}, headed: map[int]bool{}, seqs: map[int]uint64{}}
}

// follow prints until every run has ended (and returns them) or ctx ends
// (interrupted).
func (f *follower) follow(ctx context.Context) ([]store.Run, bool) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		runs, done := f.tick()
		if done {
			return runs, false
		}
		select {
		case <-ctx.Done():
			return runs, true
		case <-t.C:
		}
	}
}

func (f *follower) tick() ([]store.Run, bool) {
	var runs []store.Run
	done := true
	for _, id := range f.ids {
		run, err := f.s.DB.Runs().Get(context.Background(), id)
		if err != nil {
			fmt.Fprintf(f.out, "kiln run: cannot read run %s: %v\n", id, err)
			return runs, true
		}
		jobs := append([]store.Job(nil), run.Jobs...)
		sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].Index < jobs[j].Index })
		for _, j := range jobs {
			f.job(run, j)
		}
		runs = append(runs, run)
		if !run.Status.Terminal() {
			done = false
		}
	}
	return runs, done
}

func (f *follower) job(run store.Run, j store.Job) {
	v := f.jobs[j.ID]
	if v == nil {
		v = newJobView(0)
		f.jobs[j.ID] = v
	}
	prefix := "[" + f.safe(j.Name) + "]"
	if len(f.ids) > 1 {
		prefix = "[" + f.safe(run.Workflow) + " / " + f.safe(j.Name) + "]"
	}
	prefix = f.style.paint(sgrDim, prefix)
	// A reason is printed once it lasts two polls: the moment between a
	// job being queued and the idle agent taking it is not news.
	switch {
	case j.Status != kiln.JobQueued:
		v.reason, v.reasonSeen = "", 0
	case j.PendingReason != v.reason:
		v.reason, v.reasonSeen = j.PendingReason, 1
	case v.reasonSeen < 3:
		if v.reasonSeen++; v.reasonSeen == 3 {
			fmt.Fprintf(f.out, "%s waiting: %s\n", prefix, f.safe(j.PendingReason))
		}
	}
	if j.LeaseEpoch != v.epoch {
		old := *v
		*v = *newJobView(j.LeaseEpoch)
		v.status, v.reason, v.reasonSeen = old.status, old.reason, old.reasonSeen
	}
	// The agent's name comes before the steps it ran, however fast they were.
	if j.LeaseEpoch > 0 && !v.announced && j.AgentID != "" && (j.Status == kiln.JobRunning || j.Status.Terminal()) {
		fmt.Fprintf(f.out, "%s running on %s\n", prefix, f.safe(j.AgentID))
		v.announced = true
	}
	if j.LeaseEpoch > 0 {
		f.steps(run, j, v, prefix)
	}
	if j.Status != v.status {
		v.status = j.Status
		switch {
		case j.Status.Terminal():
			line := fmt.Sprintf("%s %s", prefix, f.style.status(string(j.Status)))
			if d := elapsed(j.StartedAt, j.FinishedAt); d != "-" {
				line += " in " + d
			}
			if j.Error != "" {
				line += ": " + f.safe(firstLine(j.Error))
			}
			fmt.Fprintln(f.out, line)
		}
	}
}

// steps prints step transitions and new log lines of the job's attempt.
// Every step that ran gets its ▶ header, also one that started and ended
// between two polls.
func (f *follower) steps(run store.Run, j store.Job, v *jobView, prefix string) {
	names := map[int]string{-1: "checkout"}
	statuses := map[int]kiln.StepStatus{}
	for _, s := range j.Steps {
		names[s.Index], statuses[s.Index] = f.safe(s.Name), s.Status
	}
	idx, _ := f.s.Logs.Steps(run.ID, j.ID, j.LeaseEpoch)
	seen := map[int]bool{}
	for _, i := range idx {
		seen[i] = true
	}
	for _, s := range j.Steps {
		if !seen[s.Index] {
			idx = append(idx, s.Index)
		}
	}
	sort.Ints(idx)
	for _, i := range idx {
		st := statuses[i]
		if i >= 0 && st != kiln.StepPending && st != "" {
			f.endCheckout(j, v, prefix) // the checkout is over once a step has begun
		}
		if st == kiln.StepSkipped {
			if v.steps[i] != st {
				fmt.Fprintf(f.out, "%s %s %s: %s\n", prefix, f.style.paint(sgrDim, "▷"), names[i], f.style.status(string(st)))
			}
			v.steps[i] = st
			continue
		}
		if !v.headed[i] && (i < 0 || st != kiln.StepPending && st != "") {
			fmt.Fprintf(f.out, "%s %s\n", prefix, f.style.paint(sgrBold, "▶ "+names[i]))
			v.headed[i] = true
		}
		ref := logstore.Ref{RunID: run.ID, JobID: j.ID, Epoch: j.LeaseEpoch, Step: i}
		for {
			lines, err := f.s.Logs.Read(ref, v.seqs[i], 1000)
			if err != nil || len(lines) == 0 {
				break
			}
			for _, l := range lines {
				text := f.safe(l.Text)
				v.seqs[i] = l.Seq
				if i < 0 && !f.verbose && !v.checkoutDone {
					v.checkout = append(v.checkout, text)
					continue
				}
				fmt.Fprintf(f.out, "%s   %s\n", prefix, text)
			}
		}
		if st.Terminal() && v.steps[i] != st && st != kiln.StepSuccess {
			fmt.Fprintf(f.out, "%s ■ %s: %s\n", prefix, names[i], f.style.status(string(st)))
		}
		v.steps[i] = st
	}
	if j.Status.Terminal() {
		f.endCheckout(j, v, prefix)
	}
}

// endCheckout prints what the checkout's held lines come to, once: all of
// them when the job failed in its checkout, else only the line saying what
// the working tree added (kiln run checks out uncommitted changes too).
func (f *follower) endCheckout(j store.Job, v *jobView, prefix string) {
	if v.checkoutDone {
		return
	}
	v.checkoutDone = true
	failed := strings.HasPrefix(j.Error, "checkout failed")
	for _, l := range v.checkout {
		if failed || strings.HasPrefix(l, "[kiln] working tree changes applied") && !strings.HasSuffix(l, ": 0 files copied, 0 removed") {
			fmt.Fprintf(f.out, "%s   %s\n", prefix, l)
		}
	}
	v.checkout = nil
}
