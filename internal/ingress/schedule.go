package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
)

// Scheduler fires the cron schedules of default-branch workflows. Each tick
// it computes, per schedule, the latest fire time that is due and not yet
// claimed, and creates its run in the transaction that claims the fire — so
// a fire runs once, even with several coordinators ticking, and a crash
// between the two is impossible. Fires missed while kiln was down are
// caught up once (the latest), not one by one.
type Scheduler struct {
	db       *store.DB
	eng      *engine.Engine
	interval time.Duration
	clock    func() time.Time
	log      *slog.Logger

	mu  sync.Mutex
	wfs map[string]*workflow.Workflow // by content hash
}

// DefaultScheduleInterval is how often schedules are evaluated.
const DefaultScheduleInterval = 15 * time.Second

// NewScheduler returns a scheduler; db must be the engine's handle.
func NewScheduler(db *store.DB, eng *engine.Engine, interval time.Duration, clock func() time.Time, log *slog.Logger) *Scheduler {
	if interval <= 0 {
		interval = DefaultScheduleInterval
	}
	if clock == nil {
		clock = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{db: db, eng: eng, interval: interval, clock: clock, log: log, wfs: map[string]*workflow.Workflow{}}
}

// Run ticks until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("schedules: tick failed; retrying on the next", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// errAlreadyFired rolls back a run whose fire another tick claimed first.
var errAlreadyFired = errors.New("fire already claimed")

// maxCatchUp bounds how many missed fire times are walked to find the
// latest one (a minutely cron down for a day is 1,440).
const maxCatchUp = 100000

// Tick fires every due schedule once.
func (s *Scheduler) Tick(ctx context.Context) error {
	list, err := s.db.Cluster().Schedules(ctx)
	if err != nil {
		return err
	}
	now := s.clock()
	for _, sc := range list {
		wf, trig, err := s.trigger(ctx, sc)
		if err != nil {
			s.log.Warn("schedules: workflow unusable", "file", sc.File, "repository", sc.Repository, "err", err)
			continue
		}
		last, err := s.db.Cluster().LastCronFire(ctx, sc.Key())
		if err != nil {
			return err
		}
		if last.IsZero() {
			last = sc.RegisteredAt
		}
		due := time.Time{}
		for t, n := trig.Next(last), 0; !t.IsZero() && !t.After(now) && n < maxCatchUp; t, n = trig.Next(t), n+1 {
			due = t
		}
		if due.IsZero() {
			continue
		}
		if err := s.fire(ctx, sc, wf, due); err != nil && !errors.Is(err, errAlreadyFired) {
			return err
		}
	}
	return nil
}

func (s *Scheduler) fire(ctx context.Context, sc store.Schedule, wf *workflow.Workflow, at time.Time) error {
	ev := &kiln.Event{
		Name: kiln.EventSchedule, Schedule: sc.Cron, Ref: "refs/heads/" + sc.Branch, Branch: sc.Branch,
		DefaultBranch: sc.Branch, SHA: sc.SHA, Repository: sc.Repository, CloneURL: sc.CloneURL, Actor: "kiln scheduler",
	}
	dec := trigger.Match(wf, ev)
	if !dec.Matched {
		return fmt.Errorf("schedule %q of %s does not match its own workflow: %s", sc.Cron, sc.File, dec.Summary)
	}
	runs, err := s.eng.Start(ctx, engine.StartRequest{Source: sc.Source, Event: ev, Matches: []engine.Match{{Workflow: wf, Decision: dec}}},
		func(tx *store.Tx, _ []store.CreatedRun) error {
			ok, err := tx.Cluster().ClaimCronFire(ctx, sc.Key(), at)
			if err != nil {
				return err
			}
			if !ok {
				return errAlreadyFired
			}
			return nil
		})
	if err != nil {
		return err
	}
	for _, r := range runs {
		s.log.Info("schedule fired", "run", r.Number, "workflow", wf.Name, "cron", sc.Cron, "at", at)
	}
	return nil
}

// trigger returns the schedule's workflow (parsed once per content hash)
// and the cron line that registered it.
func (s *Scheduler) trigger(ctx context.Context, sc store.Schedule) (*workflow.Workflow, *workflow.ScheduleTrigger, error) {
	s.mu.Lock()
	wf := s.wfs[sc.Hash]
	s.mu.Unlock()
	if wf == nil {
		content, err := s.db.Runs().WorkflowDefinition(ctx, sc.Hash)
		if err != nil {
			return nil, nil, err
		}
		if wf, err = workflow.Parse(sc.File, content); err != nil {
			return nil, nil, err
		}
		s.mu.Lock()
		s.wfs[sc.Hash] = wf
		s.mu.Unlock()
	}
	for _, t := range wf.On.Schedule {
		if t.Cron == sc.Cron && t.Timezone.String() == sc.Timezone {
			return wf, t, nil
		}
	}
	return nil, nil, fmt.Errorf("no schedule %q (%s) in the workflow", sc.Cron, sc.Timezone)
}

// scheduleSet is the schedules of a repository's default branch, to
// register in place of the previous ones.
type scheduleSet struct {
	source, repository string
	list               []store.Schedule
}

// schedulesOf returns the schedules of the default branch's workflows after
// a push to it (nil for any other event: the registered ones stay).
func (p *Processor) schedulesOf(source string, ev *kiln.Event, wfs []*workflow.Workflow, contents map[string][]byte) *scheduleSet {
	if ev.Name != kiln.EventPush || ev.DefaultBranch == "" || ev.Branch != ev.DefaultBranch {
		return nil
	}
	set := &scheduleSet{source: source, repository: ev.Repository}
	for _, wf := range wfs {
		for _, t := range wf.On.Schedule {
			set.list = append(set.list, store.Schedule{
				Source: source, Repository: ev.Repository, File: wf.File, Hash: wf.Hash, Content: contents[wf.File],
				Cron: t.Cron, Timezone: t.Timezone.String(), Branch: ev.Branch, SHA: ev.SHA, CloneURL: ev.CloneURL,
			})
		}
	}
	return set
}

// register replaces the registered schedules within tx (nil: nothing to do).
func (s *scheduleSet) register(ctx context.Context, tx *store.Tx) error {
	if s == nil {
		return nil
	}
	return tx.Cluster().ReplaceSchedules(ctx, s.source, s.repository, s.list)
}
