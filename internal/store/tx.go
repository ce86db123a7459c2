package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/runrules"
)

// maxTxRetries bounds how often Update reruns a transaction that PostgreSQL
// aborted as a deadlock victim or a serialization failure.
const maxTxRetries = 8

// Tx is one write transaction. Its accessors run their operations inside it,
// so several operations commit or roll back together: a cron fire claimed
// with the run it creates, a delivery marked processed with its runs, fifty
// completions behind one fsync.
type Tx struct{ t *txn }

// Now is the transaction's time, read once from the clock when it began.
func (tx *Tx) Now() time.Time { return tx.t.now }

func (tx *Tx) handle() handle { return handle{db: tx.t.db, tx: tx.t} }

// Runs runs run operations inside this transaction.
func (tx *Tx) Runs() Runs { return Runs{h: tx.handle()} }

// Jobs runs job reports inside this transaction.
func (tx *Tx) Jobs() Jobs { return Jobs{h: tx.handle()} }

// Queue runs queue operations inside this transaction.
func (tx *Tx) Queue() Queue { return Queue{h: tx.handle()} }

// Ingress runs delivery operations inside this transaction.
func (tx *Tx) Ingress() Ingress { return Ingress{h: tx.handle()} }

// Auth runs token and agent operations inside this transaction.
func (tx *Tx) Auth() Auth { return Auth{h: tx.handle()} }

// Sources runs source operations inside this transaction.
func (tx *Tx) Sources() Sources { return Sources{h: tx.handle()} }

// Logs runs log index operations inside this transaction.
func (tx *Tx) Logs() Logs { return Logs{h: tx.handle()} }

// Cluster runs lease and cron operations inside this transaction.
func (tx *Tx) Cluster() Cluster { return Cluster{h: tx.handle()} }

// Update runs fn in one write transaction and commits it if fn returns nil.
// On PostgreSQL a transaction aborted as a deadlock victim or for a
// serialization failure is rerun from the start, so fn must not keep state
// across calls other than what it rebuilds (results captured in variables are
// simply overwritten by the rerun). fn must not swallow errors of the
// operations it calls: on PostgreSQL a failed statement aborts the whole
// transaction. fn must use tx's accessors, never the DB's: on SQLite the
// transaction holds the only writer, and a write through the DB would wait
// for it forever.
func (db *DB) Update(ctx context.Context, fn func(tx *Tx) error) error {
	return db.update(ctx, func(t *txn) error { return fn(&Tx{t: t}) })
}

func (db *DB) update(ctx context.Context, fn func(t *txn) error) error {
	return db.updateVia(ctx, db.write, fn)
}

// beginner is where a transaction begins: the pool, or a held connection.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

func (db *DB) updateVia(ctx context.Context, b beginner, fn func(t *txn) error) error {
	// The timeline events the operation recorded are written last, in one
	// statement, in its transaction.
	// The sources it wrote are told to the watchers when it ended, even
	// failed: a commit may succeed and still report an error.
	op := fn
	var sources []string
	fn = func(t *txn) error {
		err := op(t)
		sources = t.sources
		if err != nil {
			return err
		}
		// A roll-up check left for a claim that never came still runs (the
		// caller's FlushRollUps should have: its effects are lost here).
		if err := t.flushCarried(ctx); err != nil {
			return err
		}
		return t.flushEvents(ctx)
	}
	defer func() {
		if len(sources) > 0 {
			db.sourcesWritten(sources)
		}
	}()
	var err error
	for attempt := 0; attempt < maxTxRetries; attempt++ {
		err = db.updateOnce(ctx, b, fn)
		if err == nil || !db.dialect.retryable(err) || ctx.Err() != nil {
			return err
		}
		db.log.Debug("store: transaction retried", "attempt", attempt+1, "err", err)
	}
	return err
}

func (db *DB) updateOnce(ctx context.Context, b beginner, fn func(t *txn) error) error {
	if db.comb != nil {
		return db.combined(ctx, fn)
	}
	ch, chains := b.(chainer)
	var sqlTx *sql.Tx
	if chains {
		sqlTx = ch.takeOpen()
	}
	if sqlTx == nil {
		var err error
		if sqlTx, err = b.BeginTx(ctx, nil); err != nil {
			return fmt.Errorf("begin: %w", db.dialect.wrap(err))
		}
	}
	t := &txn{db: db, tx: sqlTx, now: db.now(), locked: map[string]bool{}}
	defer func() { db.prepareWanted(context.WithoutCancel(ctx), t.wanted) }()
	if err := fn(t); err != nil {
		_ = sqlTx.Rollback()
		return err
	}
	if chains && ch.chainNext() {
		// One round trip commits this transaction and begins the next
		// (simple protocol, two statements): a COMMIT that fails skips
		// the BEGIN, and the session is left outside a transaction.
		if _, err := sqlTx.ExecContext(ctx, "COMMIT; BEGIN"); err != nil {
			_ = sqlTx.Rollback()
			return fmt.Errorf("commit: %w", db.dialect.wrap(err))
		}
		ch.keepOpen(sqlTx)
		return nil
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", db.dialect.wrap(err))
	}
	return nil
}

// chainer is a beginner whose transactions may follow each other without
// a BEGIN of their own: a commit that also begins the next transaction
// (Held, for the fleet's committer).
type chainer interface {
	beginner
	// takeOpen returns, and forgets, the transaction the last commit
	// began, or nil.
	takeOpen() *sql.Tx
	// chainNext reports whether the commit should begin the next one.
	chainNext() bool
	// keepOpen records the transaction a commit began.
	keepOpen(*sql.Tx)
}

// handle is where an accessor runs: in its own transaction (tx nil) or in a
// caller's.
type handle struct {
	db *DB
	tx *txn
}

// write runs fn in the caller's transaction or a new one.
func (h handle) write(ctx context.Context, fn func(t *txn) error) error {
	if h.tx != nil {
		return fn(h.tx)
	}
	return h.db.update(ctx, fn)
}

// op runs a job-changing operation: fn, then the consequences of what it
// changed (needs, waves, fail_fast, roll-up), collected into Effects.
func (h handle) op(ctx context.Context, fn func(t *txn) error) (Effects, error) {
	var eff Effects
	err := h.write(ctx, func(t *txn) error {
		eff = Effects{}
		prev := t.eff
		t.eff = &eff
		defer func() { t.eff = prev }()
		if err := fn(t); err != nil {
			return err
		}
		return t.settle(ctx)
	})
	return eff, err
}

// reader returns where read-only queries go: the caller's transaction, or
// the read pool (SQLite's read-only connections never wait for the writer).
func (h handle) reader() querier {
	if h.tx != nil {
		return h.tx
	}
	return readPool{h.db}
}

// now is the transaction's time, or the clock's for a read outside one.
func (h handle) now() time.Time {
	if h.tx != nil {
		return h.tx.now
	}
	return h.db.now()
}

// querier is what read helpers run on.
type querier interface {
	query(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	queryRow(ctx context.Context, q string, args ...any) *sql.Row
}

type readPool struct{ c *DB }

func (p readPool) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	rows, err := p.c.read.QueryContext(ctx, p.c.bind(q), args...)
	return rows, p.c.dialect.wrap(err)
}

func (p readPool) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return p.c.read.QueryRowContext(ctx, p.c.bind(q), args...)
}

// txn is the internal side of a write transaction.
type txn struct {
	db  *DB
	tx  *sql.Tx
	now time.Time
	eff *Effects
	// locked are the runs whose rows this transaction holds (PostgreSQL:
	// SELECT … FOR UPDATE), so job changes in a run are serialized and the
	// needs and roll-up checks see every committed sibling.
	locked map[string]bool
	// deferRollUp, carried and carriedEff: a roll-up check waiting for the
	// next claim, and what such checks changed (carriedrollup.go).
	deferRollUp bool
	carried     *carriedRollUp
	carriedEff  Effects
	// ended are the jobs that reached a terminal status and wait for settle.
	ended []runrules.Ended
	// dirty are runs to roll up at settle.
	dirty map[string]bool
	// wanted are statements to prepare once the transaction ended.
	wanted []string
	// ctx, when set, replaces the contexts operations pass to statements
	// (combined SQLite transactions must not be interrupted by one caller).
	ctx context.Context
	// events are run timeline entries waiting for flushEvents.
	events []RunEvent
	// sources are the ids of the sources the transaction wrote, for the
	// DB's WatchSources callbacks once it ended.
	sources []string
	// queuedKeys are the queue keys of the jobs the transaction's new runs
	// queued: a claim later in it (a run's inline claim) knows them
	// without reading the queue's keys.
	queuedKeys []string
}

func (t *txn) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if t.ctx != nil {
		ctx = t.ctx
	}
	if st := t.stmt(ctx, q); st != nil {
		res, err := st.ExecContext(ctx, args...)
		return res, t.db.dialect.wrap(err)
	}
	res, err := t.tx.ExecContext(ctx, t.db.bind(q), args...)
	return res, t.db.dialect.wrap(err)
}

// execFixed is exec for a statement worth preparing however many
// placeholders it has: one of a few fixed texts (see insertValues).
func (t *txn) execFixed(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if t.ctx != nil {
		ctx = t.ctx
	}
	if st := t.stmtAny(ctx, q, true); st != nil {
		res, err := st.ExecContext(ctx, args...)
		return res, t.db.dialect.wrap(err)
	}
	res, err := t.tx.ExecContext(ctx, t.db.bind(q), args...)
	return res, t.db.dialect.wrap(err)
}

func (t *txn) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if t.ctx != nil {
		ctx = t.ctx
	}
	if st := t.stmt(ctx, q); st != nil {
		rows, err := st.QueryContext(ctx, args...)
		return rows, t.db.dialect.wrap(err)
	}
	rows, err := t.tx.QueryContext(ctx, t.db.bind(q), args...)
	return rows, t.db.dialect.wrap(err)
}

func (t *txn) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if t.ctx != nil {
		ctx = t.ctx
	}
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, t.db.bind(q), args...)
}

// stmt returns the transaction's handle on a cached prepared statement, or
// nil to run q unprepared this time. Only SQLite caches: parsing a statement
// costs about as much as running it there, and its one writer connection
// keeps every cached statement hot. pgx already caches prepared statements
// per PostgreSQL connection by SQL text.
func (t *txn) stmt(ctx context.Context, q string) *sql.Stmt { return t.stmtAny(ctx, q, false) }

// stmtAny is stmt; fixed says q is worth preparing whatever its length.
func (t *txn) stmtAny(ctx context.Context, q string, fixed bool) *sql.Stmt {
	if t.db.dialect.name() != "sqlite" {
		return nil
	}
	if v, ok := t.db.stmts.Load(q); ok {
		return t.tx.StmtContext(ctx, v.(*sql.Stmt))
	}
	// The transaction holds the only writer connection, so the statement
	// is prepared after it ends (see prepareWanted). A statement with a
	// long expanded IN list is not: its text varies with the list's
	// length, and such variants would fill the cache before the fixed
	// statements every job runs got their turn.
	if t.db.nstmts.Load() < maxPrepared && (fixed || strings.Count(q, "?") <= maxPreparedParams) {
		t.wanted = append(t.wanted, q)
	}
	return nil
}

// maxPrepared bounds the statement cache; past the bound statements simply
// run unprepared.
const maxPrepared = 512

// maxPreparedParams is the most placeholders a statement worth preparing
// has (a claim for one key has 9).
const maxPreparedParams = 24

// prepareWanted prepares, on the now free writer connection, the statements
// a transaction ran unprepared.
func (db *DB) prepareWanted(ctx context.Context, qs []string) {
	for _, q := range qs {
		if _, ok := db.stmts.Load(q); ok || db.nstmts.Load() >= maxPrepared {
			continue
		}
		st, err := db.write.PrepareContext(ctx, q)
		if err != nil {
			continue // the unprepared path reports errors
		}
		if _, loaded := db.stmts.LoadOrStore(q, st); loaded {
			_ = st.Close()
			continue
		}
		db.nstmts.Add(1)
	}
}

// bind rewrites ? placeholders for the dialect, caching static statements.
func (db *DB) bind(q string) string {
	if !db.dialect.dollarParams() {
		return q
	}
	if v, ok := db.rebound.Load(q); ok {
		return v.(string)
	}
	out := rebind(q)
	// Statements with expanded IN lists vary in length; cache only the
	// shorter, static ones so the map stays small.
	if len(q) < 4096 {
		db.rebound.Store(q, out)
	}
	return out
}

// rebind turns ? into $1, $2, … outside quoted literals.
func rebind(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	inQuote := false
	for i := 0; i < len(q); i++ {
		ch := q[i]
		switch {
		case ch == '\'':
			inQuote = !inQuote
			b.WriteByte(ch)
		case ch == '?' && !inQuote:
			n++
			fmt.Fprintf(&b, "$%d", n)
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// marks returns "?, ?, ?" for n placeholders.
func marks(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// anys converts strings to query arguments.
func anys[T ~string](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}
