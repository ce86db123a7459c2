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
	MaxAttempts    int           // processing attempts before a delivery fails (default 5)
	Workers        int           // deliveries processed at once (default 4)
	Logger         *slog.Logger
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
}

// Defaults.
const (
	DefaultMaxBodyBytes = 25 << 20
	DefaultClaimLease   = 2 * time.Minute
	DefaultPollInterval = 2 * time.Second
	DefaultMaxAttempts  = 5
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
	work    chan int64
	// unverified holds a token per webhook body being read and verified.
	unverified chan struct{}

	mu      sync.Mutex
	waiters map[int64][]chan store.Delivery
}

// New returns a processor recording deliveries in db and starting their
// runs through eng.
func New(db *store.DB, eng *engine.Engine, sources *Sources, cfg Config) *Processor {
	cfg = cfg.withDefaults()
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Processor{
		db: db, eng: eng, sources: sources, cfg: cfg, log: cfg.Logger,
		owner: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		work:  make(chan int64, 1024), waiters: map[int64][]chan store.Delivery{},
		unverified: make(chan struct{}, cfg.MaxUnverified),
	}
}

// Notify hands a delivery this processor already claimed to its workers. If
// the queue is full the delivery waits for the poll, which takes it over
// once its claim expires.
func (p *Processor) Notify(id int64) {
	select {
	case p.work <- id:
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
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case id := <-p.work:
					d, err := p.db.Ingress().Get(ctx, id)
					if err != nil {
						if ctx.Err() == nil {
							p.log.Error("read delivery", "delivery", id, "err", err)
						}
						continue
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
// database unavailable) leaves it received: the poll retries it once its
// claim expires, until MaxAttempts.
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
			p.log.Warn("processing a delivery failed; it will be retried", "delivery", d.ID, "attempt", d.Attempts, "err", err)
			return
		}
		out = outcome{status: kiln.DeliveryFailed, message: fmt.Sprintf("gave up after %d attempts: %v", d.Attempts, err)}
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
	if fin, err := p.db.Ingress().Get(ctx, d.ID); err == nil {
		p.done(fin)
	}
}

// finish records the outcome, creating the runs in the same transaction.
func (p *Processor) finish(ctx context.Context, d store.Delivery, out outcome) error {
	if out.start == nil {
		return p.db.Ingress().Finish(ctx, d.ID, p.owner, out.status, out.message, nil)
	}
	out.start.DeliveryID, out.start.Source = d.ID, d.Source
	runs, err := p.eng.Start(ctx, *out.start, func(tx *store.Tx, runs []store.CreatedRun) error {
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
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
