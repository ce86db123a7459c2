package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// claimAsk is one agent's claim inside a claim statement.
type claimAsk struct {
	agentID string
	slots   int
}

// claimPostgres claims for one or more agents that accept the same keys, in
// one statement (tag ends its text: see queuePlans): a SKIP
// LOCKED range scan per key for the oldest total slots, numbered in id
// order and handed out to the asks in order (the first ask gets the oldest
// jobs). It returns each ask's jobs.
//
// The same statement moves the runs it starts from pending to running, but
// with SKIP LOCKED: the claim must never wait for a run's row while it
// holds job rows. (FOR UPDATE also locks a row it then skips because a
// committed update made it no longer queued; a completion that held that
// job's run and waited for the row would deadlock with it.) A run whose row
// was busy stays pending until its job starts (Jobs().Start). Those runs
// are looked up by primary key from the claimed jobs' runs, with a status
// guard no index serves: planned without statistics (a new install's first
// burst), the lookup read every pending run through runs_status and joined
// them with the claimed jobs — 0.9 ms more for a 60-job claim with 5,000
// runs pending (5.3 against 4.3 ms), growing with the backlog.
//
// The statement also records each claim on its run's timeline (the ev
// insert): no statement of its own, no round trip more. Inside a
// transaction, the events recorded before it are written first, so the
// timeline keeps their order (a job released and claimed in one commit):
// by the same statement too (fl), whose rows ev waits for (the count is
// computed once, before ev's first row), so they get the smaller ids. And
// a roll-up check the transaction deferred (carriedrollup.go) rides in it:
// the steps' settles as WITH items, the runs still open as rows with ask
// -1 after the claimed jobs; the runs found closed are ended after it.
func claimPostgres(ctx context.Context, q querier, tag string, nowT time.Time, ackTimeout time.Duration, keys []string, asks []claimAsk) ([][]Claimed, error) {
	now, ack := ms(nowT), ms(nowT.Add(ackTimeout))
	total := 0
	for _, a := range asks {
		total += a.slots
	}
	var args []any
	fl, carriedWith, carriedOpen := "", "", ""
	var carried *carriedRollUp
	var openArgs []any
	t, inTx := q.(*txn)
	if inTx {
		var withArgs []any
		carriedWith, withArgs, carriedOpen, openArgs, carried = t.takeCarried()
		args = append(args, withArgs...)
	}
	if inTx && len(t.events) > 0 {
		ins, insArgs, err := unnestInsert(t.takeEvents())
		if err != nil {
			return nil, err
		}
		fl = ins
		args = append(args, insArgs...)
	}
	for _, k := range keys {
		args = append(args, k, now, total)
	}
	ask, agent := make([]int32, 0, total), make([]string, 0, total)
	for i, a := range asks {
		for range a.slots {
			ask, agent = append(ask, int32(i)), append(agent, a.agentID)
		}
	}
	args = append(args, total, ask, agent, now, ack, now, now, now, now, now)
	args = append(args, openArgs...)
	out, open, err := readClaims(ctx, q, claimSQLPostgres(carriedWith, fl, len(keys), carriedOpen)+tag, args, len(asks), ack)
	if err != nil {
		return nil, err
	}
	if carried != nil {
		if err := t.closeCarried(ctx, carried, open); err != nil {
			return nil, fmt.Errorf("roll up: %w", err)
		}
	}
	return out, nil
}

// readClaims runs a claim statement and reads each ask's jobs, and the
// runs a carried roll-up check found open (rows with ask -1).
func readClaims(ctx context.Context, q querier, text string, args []any, nasks int, ack int64) ([][]Claimed, []string, error) {
	rows, err := q.query(ctx, text, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	out := make([][]Claimed, nasks)
	var open []string
	seen := map[string]bool{}
	for rows.Next() {
		var c Claimed
		var spec, key string
		var ask int
		var runStarted bool
		var queued sql.NullInt64
		if err := rows.Scan(&c.JobID, &c.RunID, &c.Name, &c.Epoch, &c.Attempt, &spec, &key, &queued, &ask, &runStarted); err != nil {
			return nil, nil, err
		}
		if ask < 0 {
			open = append(open, c.RunID)
			continue
		}
		c.QueuedAt = fromMS(queued)
		c.Spec, c.Requirement = json.RawMessage(spec), KeyRequirement(key)
		c.AckDeadline = time.UnixMilli(ack).UTC()
		if runStarted && !seen[c.RunID] {
			seen[c.RunID] = true
			c.RunStarted = true
		}
		out[ask] = append(out[ask], c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	for i := range out {
		sortClaimed(out[i])
	}
	return out, open, nil
}

// claimSQLPostgres is claimPostgres's statement for nkeys keys. fl, when
// not empty, is an insert of the transaction's pending timeline events,
// which the claim's own events must follow; carriedWith and carriedOpen,
// when not empty, are a carried roll-up check's WITH items and the FROM of
// its open runs. Its parameters: carriedWith's, fl's, then each key's
// (key, now, slots), then the slots, the asks' and agents' arrays, the
// times, and carriedOpen's.
//
// Every part is written so that no statistics can make it slow: a
// database that was never analyzed (a new install's first burst) estimates
// one row for any filtered scan of jobs, and a guard the planner can serve
// from a partial index became the outer side of a nested loop that read
// every queued job once per claimed one (auto_explain: 87 ms a 40-job
// claim with 10,000 queued). The update's status guard is therefore
// written so that no index matches it (the rows are already locked by the
// scan, which rechecked their status): the update finds its rows by
// primary key, or for a claim of many jobs on a table of a few thousand by
// one read of the table, which the planner prices lower. And its cached
// plans are made with a table of about the size it runs on (queuePlans).
func claimSQLPostgres(carriedWith, fl string, nkeys int, carriedOpen string) string {
	var b strings.Builder
	b.WriteString("WITH " + carriedWith)
	after := ""
	if fl != "" {
		b.WriteString("fl AS (" + fl + " RETURNING 1), ")
		after = " WHERE (SELECT count(*) FROM fl) >= 0"
	}
	picks := make([]string, nkeys)
	for i := range nkeys {
		fmt.Fprintf(&b, "c%d AS (%s FOR UPDATE SKIP LOCKED), ", i, claimBranchPostgres)
		picks[i] = fmt.Sprintf("SELECT id FROM c%d", i)
	}
	fmt.Fprintf(&b, "pick AS (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM (%s) u ORDER BY id LIMIT ?), ", strings.Join(picks, " UNION ALL "))
	// who owns the slots: slot n (pick.rn) goes to ask asks[n] and its
	// agent agents[n]. Arrays, so the statement's text does not change with
	// the number of slots (see oneOf), read by subscript in one row: joined
	// as a set of rows (unnest) on rn, the planner, expecting one pick, put
	// the set on the inner side of a nested loop and produced it again for
	// every pick — n² rows, 3.3 of a 32-job claim's 10.6 ms (auto_explain).
	b.WriteString("who (asks, agents) AS (SELECT ?::int[], ?::text[]), claimed AS (")
	b.WriteString("UPDATE jobs j SET " + claimSet("j.", "who.agents[pick.rn]") + ` FROM pick, who
		WHERE j.id = pick.id AND (j.status || '') = 'queued'
		RETURNING j.id, j.run_id, j.name, j.lease_epoch, j.attempts, ` + specOf("j") + ` AS spec, j.queue_key, j.queued_at,
			who.asks[pick.rn] AS ask, who.agents[pick.rn] AS agent),
		started AS (UPDATE runs r SET status = 'running', started_at = COALESCE(r.started_at, ?), updated_at = ?
		FROM (SELECT id FROM runs WHERE id = ANY(ARRAY(SELECT DISTINCT run_id FROM claimed)) AND (status || '') = 'pending' FOR UPDATE SKIP LOCKED) p
		WHERE r.id = p.id
		RETURNING r.id),
		ev AS (INSERT INTO run_events (run_id, job_id, at, type, detail)
		SELECT run_id, id, ?, '` + EventDispatched + `', 'attempt ' || attempts || ' sent to agent ' || agent FROM claimed` + after + `)
		SELECT c.id, c.run_id, c.name, c.lease_epoch, c.attempts, c.spec, c.queue_key, c.queued_at, c.ask, s.id IS NOT NULL
		FROM claimed c LEFT JOIN started s ON s.id = c.run_id`)
	if carriedOpen != "" {
		b.WriteString(" UNION ALL SELECT '', r, '', 0, 0, '', '', NULL::bigint, -1, false " + carriedOpen)
	}
	return b.String()
}

// Claims from many agents at once are combined: a few claim workers each
// take the claims waiting at the moment and run one statement per set of
// accepted keys, so a hundred agents asking together pay a few commits
// (fsyncs) instead of a hundred. Each claim still gets the oldest jobs left
// when its statement runs, and a worker that finds one claim waiting runs
// it alone, with the latency of a direct claim.
const (
	claimWorkers   = 4
	maxClaimAsks   = 64  // claims per combined statement
	maxClaimSlots  = 256 // jobs per combined statement
	claimQueueSize = 1024
)

type claimReq struct {
	ctx   context.Context
	keys  []string
	ask   claimAsk
	out   []Claimed
	err   error
	done  chan struct{}
	group string
}

type pgClaimer struct {
	c    *DB
	reqs chan *claimReq
	quit chan struct{}
	exit chan struct{}
}

func (db *DB) startClaimer() {
	db.claimer = &pgClaimer{c: db, reqs: make(chan *claimReq, claimQueueSize), quit: make(chan struct{}), exit: make(chan struct{}, claimWorkers)}
	for range claimWorkers {
		go db.claimer.work()
	}
}

func (p *pgClaimer) stop() {
	close(p.quit)
	for range claimWorkers {
		<-p.exit
	}
}

// claim submits a claim and waits for its statement. Once taken by a
// worker the claim runs even if ctx ends, and its outcome is returned, so
// no job is left dispatched to a claimer that went away unseen.
func (p *pgClaimer) claim(ctx context.Context, keys []string, agentID string, slots int) ([]Claimed, error) {
	r := &claimReq{ctx: ctx, keys: keys, ask: claimAsk{agentID, slots}, done: make(chan struct{}), group: strings.Join(keys, "\n")}
	select {
	case p.reqs <- r:
	case <-p.quit:
		return nil, errClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	<-r.done
	return r.out, r.err
}

func (p *pgClaimer) work() {
	defer func() { p.exit <- struct{}{} }()
	for {
		var first *claimReq
		select {
		case first = <-p.reqs:
		case <-p.quit:
			return
		}
		batch, slots := []*claimReq{first}, first.ask.slots
	fill:
		for len(batch) < maxClaimAsks && slots < maxClaimSlots {
			select {
			case r := <-p.reqs:
				batch = append(batch, r)
				slots += r.ask.slots
			default:
				break fill
			}
		}
		p.run(batch)
	}
}

// run claims for a batch, one statement per set of accepted keys.
func (p *pgClaimer) run(batch []*claimReq) {
	groups := map[string][]*claimReq{}
	var order []string
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.err = r.ctx.Err()
			close(r.done)
			continue
		}
		if _, ok := groups[r.group]; !ok {
			order = append(order, r.group)
		}
		groups[r.group] = append(groups[r.group], r)
	}
	for _, g := range order {
		rs := groups[g]
		asks := make([]claimAsk, len(rs))
		for i, r := range rs {
			asks[i] = r.ask
		}
		// The statement must not die with one claimer's context.
		out, err := claimPostgres(context.Background(), pool{p.c}, p.c.keys.plans.tag(), p.c.now(), p.c.cfg.AckTimeout, rs[0].keys, asks)
		for i, r := range rs {
			if err != nil {
				r.err = err
			} else {
				r.out = out[i]
			}
			close(r.done)
		}
	}
}
