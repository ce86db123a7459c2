package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// SQLite has one writer, so concurrent write transactions wait for each
// other anyway. The combiner turns that queue into group commit: it takes
// the operations waiting at the moment, runs them in one transaction, each
// but the first under its own SAVEPOINT (an operation that fails rolls back
// alone), and commits them together. Each operation stays atomic and sees exactly what
// serial execution would show it; the BEGIN, the COMMIT and the WAL writes
// of the pages they share are paid once per batch instead of once per
// operation.

// maxCombined bounds the operations of one combined transaction, and
// combineBudget its running time.
const (
	maxCombined   = 64
	combineBudget = 2 * time.Millisecond
)

var errClosed = errors.New("store: closed")

type writeReq struct {
	ctx  context.Context
	db   *DB
	fn   func(t *txn) error
	err  error
	done chan struct{}
}

type combiner struct {
	reqs chan *writeReq
	quit chan struct{}
	exit chan struct{}
}

func (db *DB) startCombiner() {
	db.comb = &combiner{reqs: make(chan *writeReq), quit: make(chan struct{}), exit: make(chan struct{})}
	go db.combine()
}

func (db *DB) stopCombiner() {
	if db.comb != nil {
		close(db.comb.quit)
		<-db.comb.exit
	}
}

// combined runs fn as one operation of a combined transaction and returns
// once that transaction committed or rolled back.
func (db *DB) combined(ctx context.Context, fn func(t *txn) error) error {
	r := &writeReq{ctx: ctx, db: db, fn: fn, done: make(chan struct{})}
	select {
	case db.comb.reqs <- r:
	case <-db.comb.quit:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once taken, the operation runs (or is refused for its cancelled
	// context) and its outcome is known before we return.
	<-r.done
	return r.err
}

func (db *DB) combine() {
	defer close(db.comb.exit)
	var pending []*writeReq
	for {
		if len(pending) == 0 {
			select {
			case r := <-db.comb.reqs:
				pending = append(pending, r)
			case <-db.ckpt.finish:
				db.finishCheckpoint()
				continue
			case <-db.comb.quit:
				return
			}
		} else {
			select {
			case <-db.ckpt.finish:
				db.finishCheckpoint()
			default:
			}
		}
	fill:
		for len(pending) < maxCombined {
			select {
			case r := <-db.comb.reqs:
				pending = append(pending, r)
			default:
				break fill
			}
		}
		n := db.runBatch(pending)
		pending = append(pending[:0], pending[n:]...)
	}
}

// runBatch runs operations of batch in one transaction, in order, until
// they are done or the transaction has run for combineBudget; it returns
// how many it ran. The rest wait for the next transaction, so no operation
// (a claim, typically) waits long behind a heap of others.
//
// The transaction's first operation runs bare, without a SAVEPOINT: under
// one, every page an operation changes is first copied to the statement
// journal, and with the savepoint's release that was ~7% of the server's
// CPU at 100 busy agents, most of it for batches of one (the fleet's
// committer hands over its whole batch as one operation). A bare operation
// that fails rolls the transaction back, which undoes only its own work,
// and the next operation starts a new one.
func (db *DB) runBatch(batch []*writeReq) (n int) {
	var wanted []string
	defer func() {
		for _, r := range batch[:n] {
			close(r.done)
		}
		db.prepareWanted(context.Background(), wanted)
	}()
	// The transaction must not die with one caller's context: interrupting
	// a statement would roll back every operation in the batch.
	bg := context.Background()
	start := time.Now()
	var sqlTx *sql.Tx
	for _, r := range batch {
		if n > 0 && time.Since(start) > combineBudget {
			break
		}
		n++
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		bare := sqlTx == nil
		if bare {
			var err error
			if sqlTx, err = db.write.BeginTx(bg, nil); err != nil {
				r.err = fmt.Errorf("begin: %w", err)
				sqlTx = nil
				continue
			}
		} else if _, err := sqlTx.ExecContext(bg, "SAVEPOINT op"); err != nil {
			r.err = err
			continue
		}
		t := &txn{db: r.db, tx: sqlTx, now: r.db.now(), locked: map[string]bool{}, ctx: context.WithoutCancel(r.ctx)}
		r.err = r.fn(t)
		wanted = append(wanted, t.wanted...)
		switch {
		case bare && r.err != nil:
			_ = sqlTx.Rollback()
			sqlTx = nil
		case bare:
		case r.err != nil:
			_, _ = sqlTx.ExecContext(bg, "ROLLBACK TO op")
			fallthrough
		default:
			if _, err := sqlTx.ExecContext(bg, "RELEASE op"); err != nil && r.err == nil {
				r.err = err
			}
		}
	}
	if sqlTx == nil {
		return n
	}
	if err := sqlTx.Commit(); err != nil {
		for _, r := range batch[:n] {
			if r.err == nil {
				r.err = fmt.Errorf("commit: %w", err)
			}
		}
		return n
	}
	db.ckpt.poke()
	return n
}
