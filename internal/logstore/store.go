package logstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultMaxOpenFiles bounds the file descriptors the store keeps open.
const DefaultMaxOpenFiles = 256

// Config configures a Store.
type Config struct {
	Dir          string // where the logs live (created if missing)
	MaxOpenFiles int
	Logger       *slog.Logger
	// Archive, when set, is where step logs are shipped so that every
	// server sharing the database reads them (Run ships them); nil keeps
	// them in Dir only.
	Archive Archive
	// MaxStepBytes caps a step attempt's output (default
	// DefaultMaxStepBytes, the executor's own cap); see stepBudget.
	MaxStepBytes int64
	// ShipInterval is how often the new lines of running steps are
	// shipped to the Archive (what a viewer on another server waits at
	// most, besides its poll); a finished step's are shipped at once.
	ShipInterval time.Duration
}

// Ref names one step attempt's log. Epoch is the job's lease epoch, so a job
// requeued to another agent starts a fresh log instead of colliding with the
// sequence numbers of the first attempt.
type Ref struct {
	RunID string
	JobID string
	Epoch int64
	Step  int // -1 is the checkout pseudo-step
}

func (r Ref) String() string { return fmt.Sprintf("%s/%s/e%d/%d", r.RunID, r.JobID, r.Epoch, r.Step) }

// Store appends, reads and follows step logs. It is safe for concurrent use.
type Store struct {
	dir     string
	max     int
	maxStep int64
	logger  *slog.Logger

	mu    sync.Mutex
	open  map[Ref]*list.Element // of *stepFile
	lru   *list.List
	subMu sync.Mutex
	subs  map[string]map[*Subscription]struct{}

	archive   Archive
	shipEvery time.Duration
	shipMu    sync.Mutex
	dirty     map[Ref]bool // steps with lines to ship → the step ended
	shipped   map[Ref]shipState
	wake      chan struct{}
	shipBuf   []byte // the shipper's; one segment
}

type stepFile struct {
	ref    Ref
	mu     sync.Mutex
	f      *os.File
	last   uint64 // highest seq stored
	buf    []byte
	budget stepBudget // what the log used of the cap (B104)
}

// Open opens (and creates) a log store.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("logstore: Dir is required")
	}
	if cfg.MaxOpenFiles <= 0 {
		cfg.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ShipInterval <= 0 {
		cfg.ShipInterval = DefaultShipInterval
	}
	if cfg.MaxStepBytes <= 0 {
		cfg.MaxStepBytes = DefaultMaxStepBytes
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	s := &Store{
		dir: cfg.Dir, max: cfg.MaxOpenFiles, maxStep: cfg.MaxStepBytes, logger: cfg.Logger,
		open: map[Ref]*list.Element{}, lru: list.New(),
		subs:    map[string]map[*Subscription]struct{}{},
		archive: cfg.Archive, shipEvery: cfg.ShipInterval,
		dirty: map[Ref]bool{}, shipped: map[Ref]shipState{}, wake: make(chan struct{}, 1),
	}
	if s.archive != nil {
		s.shipBuf = make([]byte, segmentBytes)
	}
	return s, nil
}

// validID guards the path: ids come from the store, but a path is never
// built from anything that could climb out of the directory.
func validID(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
			return false
		}
	}
	return true
}

func (s *Store) jobDir(runID, jobID string) (string, error) {
	if !validID(runID) || !validID(jobID) {
		return "", fmt.Errorf("logstore: invalid run or job id %q/%q", runID, jobID)
	}
	return filepath.Join(s.dir, runID, jobID), nil
}

func (s *Store) path(r Ref) (string, error) {
	d, err := s.jobDir(r.RunID, r.JobID)
	if err != nil {
		return "", err
	}
	if r.Epoch < 1 || r.Step < -1 {
		return "", fmt.Errorf("logstore: invalid log reference %s", r)
	}
	return filepath.Join(d, "e"+strconv.FormatInt(r.Epoch, 10), strconv.Itoa(r.Step)+".jsonl"), nil
}

// Append stores the lines of one step whose seq is above what is already
// stored, in order, and returns how many it stored. Lines must be in
// ascending seq order (the protocol validates that). When Append returns
// without error the lines are durable against a process crash.
func (s *Store) Append(r Ref, lines []Line) (int, error) {
	sf, err := s.file(r)
	if err != nil {
		return 0, err
	}
	sf.mu.Lock()
	if sf.f == nil { // evicted between lookup and lock: reopen
		sf.mu.Unlock()
		return s.Append(r, lines)
	}
	i := 0
	for i < len(lines) && lines[i].Seq <= sf.last {
		i++
	}
	fresh := lines[i:]
	if len(fresh) == 0 {
		sf.mu.Unlock()
		return 0, nil
	}
	batchLast := fresh[len(fresh)-1].Seq
	if fresh = sf.budget.admit(fresh, s.maxStep); len(fresh) == 0 {
		sf.last = batchLast // dropped over the cap, and never stored later
		sf.mu.Unlock()
		return 0, nil
	}
	sf.buf = sf.buf[:0]
	for k := range fresh {
		sf.buf = appendLine(sf.buf, &fresh[k])
	}
	_, err = sf.f.Write(sf.buf)
	if err != nil {
		sf.mu.Unlock()
		return 0, fmt.Errorf("logstore: append %s: %w", r, err)
	}
	sf.last = batchLast
	s.publish(r, fresh, sf.buf) // under the file's lock, so viewers see a step's batches in order
	if cap(sf.buf) > 1<<20 {
		sf.buf = nil // don't pin a large buffer per open file
	}
	sf.mu.Unlock()
	s.markDirty(r, false)
	return len(fresh), nil
}

// LastSeq returns the highest seq stored for a step (0 if none).
func (s *Store) LastSeq(r Ref) (uint64, error) {
	sf, err := s.file(r)
	if err != nil {
		return 0, err
	}
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return sf.last, nil
}

// file returns the open file for r, opening it (and recovering its
// high-water mark) on first use and evicting the least recently used one
// past the limit.
func (s *Store) file(r Ref) (*stepFile, error) {
	s.mu.Lock()
	if e, ok := s.open[r]; ok {
		s.lru.MoveToFront(e)
		s.mu.Unlock()
		return e.Value.(*stepFile), nil
	}
	s.mu.Unlock()

	p, err := s.path(r)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	last, err := recoverTail(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("logstore: open %s: %w", r, err)
	}
	sf := &stepFile{ref: r, f: f, last: last}
	if last > 0 {
		if sf.budget, err = recount(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("logstore: open %s: %w", r, err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.open[r]; ok { // lost a race with another opener
		f.Close()
		s.lru.MoveToFront(e)
		return e.Value.(*stepFile), nil
	}
	s.open[r] = s.lru.PushFront(sf)
	for s.lru.Len() > s.max {
		old := s.lru.Remove(s.lru.Back()).(*stepFile)
		delete(s.open, old.ref)
		old.mu.Lock()
		old.f.Close()
		old.f = nil
		old.mu.Unlock()
	}
	return sf, nil
}

// tailBytes is how much of a file's end is read to find its last line; lines
// are at most 64 KiB of text, which JSON escaping can grow sixfold.
const tailBytes = 1 << 20

// recoverTail finds the last stored seq and cuts off what follows the last
// good line: a torn final line left by a crash in the middle of a write, or
// a garbled tail (B138). Every good line before it — each one acknowledged
// to an agent once written — is kept.
func recoverTail(f *os.File) (uint64, error) {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	off := max(st.Size()-tailBytes, 0)
	data := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(data, off); err != nil && err != io.EOF {
		return 0, err
	}
	seq, good, found := goodPrefix(data, off > 0)
	if !found && off > 0 {
		// Not one good line in the last MiB of a longer file: that is no
		// torn write, and cutting a MiB of a log is not recovery.
		return 0, fmt.Errorf("no readable line in the last %d bytes", len(data))
	}
	if keep := off + int64(good); keep != st.Size() {
		if err := f.Truncate(keep); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

// CloseStep releases the file of a finished step (and ships what is left
// of it to the archive at once).
func (s *Store) CloseStep(r Ref) {
	defer s.markDirty(r, true)
	s.mu.Lock()
	e, ok := s.open[r]
	if ok {
		s.lru.Remove(e)
		delete(s.open, r)
	}
	s.mu.Unlock()
	if ok {
		sf := e.Value.(*stepFile)
		sf.mu.Lock()
		if sf.f != nil {
			sf.f.Close()
			sf.f = nil
		}
		sf.mu.Unlock()
	}
}

// Close closes every open file and ends every subscription.
func (s *Store) Close() error {
	s.mu.Lock()
	var errs []error
	for r, e := range s.open {
		sf := e.Value.(*stepFile)
		sf.mu.Lock()
		if sf.f != nil {
			errs = append(errs, sf.f.Close())
			sf.f = nil
		}
		sf.mu.Unlock()
		delete(s.open, r)
	}
	s.lru.Init()
	s.mu.Unlock()
	s.subMu.Lock()
	for _, set := range s.subs {
		for sub := range set {
			sub.end(false)
		}
	}
	s.subs = map[string]map[*Subscription]struct{}{}
	s.subMu.Unlock()
	return errors.Join(errs...)
}

// Steps lists the step logs of a job's attempt (lease epoch), sorted: the
// files here and, with an Archive, the steps shipped there.
func (s *Store) Steps(runID, jobID string, epoch int64) ([]int, error) {
	d, err := s.jobDir(runID, jobID)
	if err != nil {
		return nil, err
	}
	set := map[int]bool{}
	ents, err := os.ReadDir(filepath.Join(d, "e"+strconv.FormatInt(epoch, 10)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".jsonl"); ok {
			if i, err := strconv.Atoi(n); err == nil {
				set[i] = true
			}
		}
	}
	if s.archive != nil {
		ctx, cancel := context.WithTimeout(context.Background(), archiveTimeout)
		defer cancel()
		if err := s.archivedSteps(ctx, runID, jobID, epoch, set); err != nil {
			return nil, err
		}
	}
	steps := make([]int, 0, len(set))
	for i := range set {
		steps = append(steps, i)
	}
	sort.Ints(steps)
	return steps, nil
}
