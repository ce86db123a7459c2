package ingress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/workflow"
)

// Config configures the processor.
type Config struct {
	MaxBodyBytes int64 // largest webhook body (default 25 MiB)
	// MaxUnverified bounds the webhook bodies read at once before their
	// signature is checked, InMemoryBytes how much of each is held in
	// memory (the rest is spooled to a file in SpoolDir), and
	// UnverifiedWait how long a webhook waits for one of those slots
	// before it is answered 503 (B103).
	MaxUnverified  int
	InMemoryBytes  int64
	SpoolDir       string
	UnverifiedWait time.Duration
	ClaimLease     time.Duration // how long a processor holds a delivery (default 2m)
	PollInterval   time.Duration // how often unclaimed deliveries are looked for (default 2s)
	MaxAttempts    int           // processing attempts before a delivery fails (default 8)
	// RetryBase is the wait after a delivery's first failed attempt; it
	// doubles per attempt up to RetryMax (defaults 2s and 1m: with 8
	// attempts a delivery is given up about 3 minutes after it arrived).
	RetryBase, RetryMax time.Duration
	// Owner names this processor's server in the deliveries it claims
	// (as Owner/<random>). A server passes its instance id, the same
	// across restarts, so that its next start takes up at once what it
	// held when it stopped; default the host name and pid.
	Owner   string
	Workers int // deliveries processed at once (default 4)
	Logger  *slog.Logger
	// Recorded, when set, is called for every delivery recorded (a
	// webhook, a kiln trigger push, a manual dispatch) with its source's
	// name, its event, and whether it was a duplicate, which is finished
	// at once. For metrics: it must be quick.
	Recorded func(source, event string, duplicate bool)
	// Finished, when set, is called with the outcome of every delivery
	// this processor finishes (duplicates excepted: see Recorded).
	Finished func(kiln.DeliveryStatus)
	// Refused, when set, is called with the error code of every webhook
	// request refused (unknown source, bad signature, too large, …).
	Refused func(kiln.Code)
	// Invalid, when set, is called with every delivery this processor
	// finishes invalid_workflow: the server posts its lint errors as check
	// runs. It must not block.
	Invalid func(InvalidWorkflows)
}

// InvalidWorkflows is a delivery that ended invalid_workflow: its event and
// the lint errors of its broken workflow files (each file's path, line and
// message).
type InvalidWorkflows struct {
	DeliveryID int64
	Source     string // the source's id
	Event      *kiln.Event
	Errors     workflow.ErrorList
}

// Defaults.
const (
	DefaultMaxBodyBytes = 25 << 20
	DefaultClaimLease   = 2 * time.Minute
	DefaultPollInterval = 2 * time.Second
	DefaultMaxAttempts  = 8
	DefaultRetryBase    = 2 * time.Second
	DefaultRetryMax     = time.Minute
	DefaultWorkers      = 4
	// DefaultMaxUnverified × forge.DefaultInMemoryBody (8 MiB) is the most
	// memory strangers' webhook bodies hold before they are verified.
	DefaultMaxUnverified  = 32
	DefaultUnverifiedWait = 10 * time.Second
)

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ClaimLease <= 0 {
		c.ClaimLease = DefaultClaimLease
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.RetryBase <= 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryMax <= 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.MaxUnverified <= 0 {
		c.MaxUnverified = DefaultMaxUnverified
	}
	if c.InMemoryBytes <= 0 {
		c.InMemoryBytes = forge.DefaultInMemoryBody
	}
	if c.UnverifiedWait <= 0 {
		c.UnverifiedWait = DefaultUnverifiedWait
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Processor records deliveries and turns them into runs.
type Processor struct {
	db      *store.DB
	eng     *engine.Engine
	sources *Sources
	cfg     Config
	log     *slog.Logger
	owner   string
	work    chan store.Delivery
	// unverified holds a token per webhook body being read and verified.
	unverified chan struct{}

	mu      sync.Mutex
	waiters map[int64][]chan store.Delivery
	// parsed are the workflows parsed for earlier deliveries.
	parsed parseCache
}

// New returns a processor recording deliveries in db and starting their
// runs through eng.
func New(db *store.DB, eng *engine.Engine, sources *Sources, cfg Config) *Processor {
	cfg = cfg.withDefaults()
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Processor{
		db: db, eng: eng, sources: sources, cfg: cfg, log: cfg.Logger,
		owner: cfg.Owner + "/" + hex.EncodeToString(b[:]),
		work:  make(chan store.Delivery, 1024), waiters: map[int64][]chan store.Delivery{},
		unverified: make(chan struct{}, cfg.MaxUnverified),
	}
}

// handBodyMax is the largest body a delivery is handed to the workers
// with: a larger one is read back by the worker, so the work queue (1,024
// deliveries) holds at most 64 MiB of bodies. Push and pull-request
// payloads are typically 5–40 KiB.
const handBodyMax = 64 << 10

// notify hands a delivery this processor just recorded, claimed, to its
// workers — as recorded, so no worker reads it back from the database. If
// the queue is full the delivery waits for the poll, which takes it over
// once its claim expires.
func (p *Processor) notify(id int64, nd store.NewDelivery) {
	d := store.Delivery{ID: id}
	if len(nd.Body) <= handBodyMax {
		d = store.Delivery{ID: id, Source: nd.Source, DeliveryID: nd.DeliveryID, Event: nd.Event, Headers: nd.Headers,
			Body: nd.Body, Status: kiln.DeliveryReceived, ReceivedAt: time.Now(), Attempts: 1}
	}
	select {
	case p.work <- d:
	default:
	}
}

// recorded tells the Recorded hook about a delivery just recorded.
func (p *Processor) recorded(source, event string, duplicate bool) {
	if p.cfg.Recorded != nil {
		p.cfg.Recorded(source, event, duplicate)
	}
}

// Wait returns a channel that receives the delivery once it is finished
// (at once when it already is).
func (p *Processor) Wait(id int64) <-chan store.Delivery {
	c := make(chan store.Delivery, 1)
	p.mu.Lock()
	p.waiters[id] = append(p.waiters[id], c)
	p.mu.Unlock()
	// The delivery may have finished before the caller asked.
	if d, err := p.db.Ingress().Get(context.Background(), id); err == nil && d.Status != kiln.DeliveryReceived {
		p.done(d)
	}
	return c
}

func (p *Processor) done(d store.Delivery) {
	p.mu.Lock()
	cs := p.waiters[d.ID]
	delete(p.waiters, d.ID)
	p.mu.Unlock()
	for _, c := range cs {
		c <- d
	}
}

// Run processes deliveries until ctx ends: those handed over by Notify at
// once, and every poll interval any received delivery whose claim expired
// (one a crashed server answered 202 for, or one whose processing failed
// and is due for another attempt).
func (p *Processor) Run(ctx context.Context) error {
	// What this processor's owner held before a restart is taken up now,
	// not when those claims expire.
	if n, err := p.db.Ingress().Release(ctx, p.cfg.Owner, p.owner); err != nil && ctx.Err() == nil {
		p.log.Warn("release the deliveries held before a restart", "err", err)
	} else if n > 0 {
		p.log.Info("taking up the deliveries held when this server stopped", "count", n)
	}
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case d := <-p.work:
					if d.Source == "" { // handed without its body
						id := d.ID
						var err error
						if d, err = p.db.Ingress().Get(ctx, id); err != nil {
							if ctx.Err() == nil {
								p.log.Error("read delivery", "delivery", id, "err", err)
							}
							continue
						}
					}
					p.process(ctx, d)
				}
			}
		}()
	}
	t := time.NewTicker(p.cfg.PollInterval)
	defer t.Stop()
	for {
		p.poll(ctx)
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
		}
	}
}

func (p *Processor) poll(ctx context.Context) {
	ds, err := p.db.Ingress().Claim(ctx, p.owner, p.cfg.ClaimLease, 10)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Error("claim deliveries", "err", err)
		}
		return
	}
	for _, d := range ds {
		if d.Attempts > 1 {
			p.log.Info("taking over a delivery", "delivery", d.ID, "attempt", d.Attempts)
		}
		p.process(ctx, d)
	}
}

// process handles one claimed delivery. A transient failure (forge or
// database unavailable) leaves it received, with the failure as its
// message: the poll retries it after a growing wait (retryDelay), until
// MaxAttempts.
func (p *Processor) process(ctx context.Context, d store.Delivery) {
	if d.Status != kiln.DeliveryReceived {
		return
	}
	out, err := p.handle(ctx, d)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if d.Attempts < p.cfg.MaxAttempts {
			p.retry(ctx, d, err)
			return
		}
		out = outcome{status: kiln.DeliveryFailed, message: fmt.Sprintf("gave up after %d attempts over %s: %s", d.Attempts,
			time.Since(d.ReceivedAt).Round(time.Second), kiln.ErrorMessage(err))}
	}
	if err := p.finish(ctx, d, out); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("finishing a delivery failed; it will be retried", "delivery", d.ID, "err", err)
		}
		return
	}
	if p.cfg.Finished != nil {
		p.cfg.Finished(out.status)
	}
	if out.invalid != nil && p.cfg.Invalid != nil {
		out.invalid.DeliveryID = d.ID
		p.cfg.Invalid(*out.invalid)
	}
	// Read back for those waiting on it only (kiln trigger): a waiter
	// that registers after this check reads it itself (Wait).
	if p.awaited(d.ID) {
		if fin, err := p.db.Ingress().Get(ctx, d.ID); err == nil {
			p.done(fin)
		}
	}
}

// awaited reports whether someone waits for the delivery to finish.
func (p *Processor) awaited(id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters[id]) > 0
}

// retry records why an attempt failed and when the next one is due.
func (p *Processor) retry(ctx context.Context, d store.Delivery, cause error) {
	wait := p.retryDelay(d.Attempts)
	reason := fmt.Sprintf("attempt %d of %d failed: %s; retrying in %s", d.Attempts, p.cfg.MaxAttempts, kiln.ErrorMessage(cause), wait)
	p.log.Warn("processing a delivery failed; it will be retried", "delivery", d.ID, "attempt", d.Attempts, "retry_in", wait.String(), "err", kiln.ErrorMessage(cause))
	if err := p.db.Ingress().Retry(ctx, d.ID, p.owner, reason, wait); err != nil && ctx.Err() == nil {
		p.log.Warn("record a delivery's failed attempt", "delivery", d.ID, "err", err)
	}
}

// retryDelay is the wait after the attempt-th failed attempt: RetryBase
// doubling up to RetryMax.
func (p *Processor) retryDelay(attempt int) time.Duration {
	d := p.cfg.RetryBase
	for i := 1; i < attempt && d < p.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, p.cfg.RetryMax)
}

// finish records the outcome, creating the runs and registering the
// default branch's schedules in the same transaction.
func (p *Processor) finish(ctx context.Context, d store.Delivery, out outcome) error {
	if out.start == nil {
		if out.schedules == nil {
			return p.db.Ingress().Finish(ctx, d.ID, p.owner, out.status, out.message, nil)
		}
		return p.db.Update(ctx, func(tx *store.Tx) error {
			if err := out.schedules.register(ctx, tx); err != nil {
				return err
			}
			return tx.Ingress().Finish(ctx, d.ID, p.owner, out.status, out.message, nil)
		})
	}
	out.start.DeliveryID, out.start.Source = d.ID, d.Source
	runs, err := p.eng.Start(ctx, *out.start, func(tx *store.Tx, runs []store.CreatedRun) error {
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		if err := out.schedules.register(ctx, tx); err != nil {
			return err
		}
		return tx.Ingress().Finish(ctx, d.ID, p.owner, kiln.DeliveryProcessed, out.message, ids)
	})
	if err != nil {
		return err
	}
	for _, r := range runs {
		p.log.Info("run created", "run", r.Number, "delivery", d.ID)
	}
	return nil
}
