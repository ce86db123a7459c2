package localrun

import (
	"context"
	"fmt"
	"io"
	"sort"
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
	s    *server.Server
	ids  []string
	out  io.Writer
	jobs map[string]*jobView
}

type jobView struct {
	status kiln.JobStatus
	reason string
	epoch  int64
	steps  map[int]kiln.StepStatus
	seqs   map[int]uint64
}

func newFollower(s *server.Server, ids []string, out io.Writer) *follower {
	return &follower{s: s, ids: ids, out: out, jobs: map[string]*jobView{}}
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
		v = &jobView{steps: map[int]kiln.StepStatus{}, seqs: map[int]uint64{}}
		f.jobs[j.ID] = v
	}
	prefix := "[" + j.Name + "]"
	if len(f.ids) > 1 {
		prefix = "[" + run.Workflow + " / " + j.Name + "]"
	}
	if j.Status == kiln.JobQueued && j.PendingReason != v.reason {
		fmt.Fprintf(f.out, "%s waiting: %s\n", prefix, j.PendingReason)
		v.reason = j.PendingReason
	}
	if j.LeaseEpoch != v.epoch {
		v.epoch, v.steps, v.seqs = j.LeaseEpoch, map[int]kiln.StepStatus{}, map[int]uint64{}
	}
	if j.LeaseEpoch > 0 {
		f.steps(run, j, v, prefix)
	}
	if j.Status != v.status {
		v.status = j.Status
		switch {
		case j.Status == kiln.JobRunning:
			fmt.Fprintf(f.out, "%s running on %s\n", prefix, j.AgentID)
		case j.Status.Terminal():
			line := fmt.Sprintf("%s %s", prefix, j.Status)
			if d := elapsed(j.StartedAt, j.FinishedAt); d != "-" {
				line += " in " + d
			}
			if j.Error != "" {
				line += ": " + firstLine(j.Error)
			}
			fmt.Fprintln(f.out, line)
		}
	}
}

// steps prints step transitions and new log lines of the job's attempt.
func (f *follower) steps(run store.Run, j store.Job, v *jobView, prefix string) {
	names := map[int]string{-1: "checkout"}
	statuses := map[int]kiln.StepStatus{}
	for _, s := range j.Steps {
		names[s.Index], statuses[s.Index] = s.Name, s.Status
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
		if st == kiln.StepRunning && v.steps[i] != st {
			fmt.Fprintf(f.out, "%s ▶ %s\n", prefix, names[i])
		}
		ref := logstore.Ref{RunID: run.ID, JobID: j.ID, Epoch: j.LeaseEpoch, Step: i}
		for {
			lines, err := f.s.Logs.Read(ref, v.seqs[i], 1000)
			if err != nil || len(lines) == 0 {
				break
			}
			for _, l := range lines {
				fmt.Fprintf(f.out, "%s   %s\n", prefix, l.Text)
				v.seqs[i] = l.Seq
			}
		}
		if st.Terminal() && v.steps[i] != st && st != kiln.StepSuccess {
			fmt.Fprintf(f.out, "%s ■ %s: %s\n", prefix, names[i], st)
		}
		v.steps[i] = st
	}
}
