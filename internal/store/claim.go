package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kilnci/kiln"
)

// Claiming without scanning work nobody can take: every queued job carries
// queue_key = kiln.Requirement.Key(), and the partial index jobs_queued is
// (queue_key, id) over queued rows only. A claim first reads the distinct
// queued keys with a skip scan of that index (one probe per distinct key, so
// its cost does not grow with the number of queued jobs), keeps in Go the
// keys the agent accepts (labels, exclusions, mandatory labels), and claims
// the oldest jobs of those keys with one index range scan per key. A backlog
// of jobs with keys the agent does not accept is never read.

// Claimed is a job an agent claimed.
type Claimed struct {
	JobID       string
	RunID       string
	Name        string
	Epoch       int64 // the lease epoch every report about the job must carry
	Attempt     int   // 1 for the first dispatch
	Spec        json.RawMessage
	Requirement kiln.Requirement
	AckDeadline time.Time
	// RunStarted: this claim moved the job's run from pending to running.
	RunStarted bool
	// QueuedAt is when the job entered the queue (the clock of the server
	// that queued it, to the millisecond).
	QueuedAt time.Time
}

// distinctKeysSQL reads the distinct queued keys by skip-scanning the
// partial index jobs_queued.
const distinctKeysSQL = `WITH RECURSIVE k(key) AS (
	SELECT (SELECT queue_key FROM jobs WHERE status = 'queued' ORDER BY queue_key LIMIT 1)
	UNION ALL
	SELECT (SELECT queue_key FROM jobs WHERE status = 'queued' AND queue_key > k.key ORDER BY queue_key LIMIT 1)
	FROM k WHERE k.key IS NOT NULL
) SELECT key FROM k WHERE key IS NOT NULL`

// Keys returns the distinct routing keys of the queued jobs.
func (q Queue) Keys(ctx context.Context) ([]string, error) {
	return queryStrings(ctx, q.h.reader(), distinctKeysSQL+q.h.db.keys.plans.tag())
}

// HasMatch reports whether any queued job is one the agent would accept.
func (q Queue) HasMatch(ctx context.Context, agent kiln.AgentLabels) (bool, error) {
	keys, err := q.Keys(ctx)
	if err != nil {
		return false, err
	}
	return len(acceptedKeys(keys, agent)) > 0, nil
}

// requirements caches parsed queue keys for the process: the claim path
// and the dispatcher read each queued key's requirement per claim.
var requirements = requirementCache{max: maxCachedKeys}

// maxCachedKeys bounds the cache. Distinct keys come from what workflows
// ask for (runs_on may be an expression or vary with a matrix), not from
// the code, so their number has no bound of its own; a few thousand covers
// any real fleet's queued keys many times over.
const maxCachedKeys = 4096

// requirementCache maps queue keys to their parsed requirements and holds at most
// max of them: when full it starts over, so keys no longer queued do not
// stay forever and the ones still in use are parsed again once.
type requirementCache struct {
	mu  sync.RWMutex
	m   map[string]kiln.Requirement
	max int
}

func (c *requirementCache) get(key string) kiln.Requirement {
	c.mu.RLock()
	r, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return r
	}
	r = kiln.ParseRequirementKey(key)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[string]kiln.Requirement, min(c.max, 64))
	}
	c.m[key] = r
	c.mu.Unlock()
	return r
}

func (c *requirementCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// KeyRequirement is the requirement a queue key stands for (the inverse of
// kiln.Requirement.Key), parsed once per key while it stays in a bounded
// cache. Callers must not modify it.
func KeyRequirement(key string) kiln.Requirement {
	return requirements.get(key)
}

func acceptedKeys(keys []string, agent kiln.AgentLabels) []string {
	var out []string
	for _, k := range keys {
		if agent.Accepts(KeyRequirement(k)) {
			out = append(out, k)
		}
	}
	return out
}

// Claim claims up to slots of the oldest queued jobs the agent accepts, for
// that agent, in one statement: each becomes dispatched under a new lease
// epoch with an ack deadline, its attempt counted, its
// last_provisioning_error and pending reason cleared. Two claimers never get
// the same job (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: the single
// writer). A run moves from pending to running with its first claim.
func (q Queue) Claim(ctx context.Context, agentID string, agent kiln.AgentLabels, slots int) ([]Claimed, error) {
	if slots <= 0 {
		return nil, nil
	}
	if agentID == "" {
		return nil, invalid("a claim needs an agent id")
	}
	db := q.h.db
	if q.h.tx == nil && db.dialect.name() == "postgres" {
		// Autocommit statements, combined with other agents' claims.
		return db.claim(ctx, pool{db}, agent, slots, func(keys []string, n int) ([]Claimed, error) {
			return db.claimer.claim(ctx, keys, agentID, n)
		})
	}
	var out []Claimed
	err := q.h.write(ctx, func(t *txn) error {
		var err error
		out, err = db.claim(ctx, t, agent, slots, func(keys []string, n int) ([]Claimed, error) {
			if db.dialect.name() == "sqlite" {
				return claimSQLite(ctx, t, keys, agentID, n)
			}
			outs, err := claimPostgres(ctx, t, db.keys.plans.tag(), t.now, db.cfg.AckTimeout, keys, []claimAsk{{agentID, n}})
			if err != nil {
				return nil, err
			}
			return outs[0], nil
		})
		return err
	})
	return out, err
}

// claim picks the keys to claim from: the cached queued keys the agent
// accepts, and — when those do not fill the slots and the cache was not
// fresh — the keys a fresh read adds. A stale cache therefore never leaves
// an agent idle while work it accepts is queued; at worst, for the cache's
// lifetime, a newer key's jobs wait behind those of keys already known.
func (db *DB) claim(ctx context.Context, q querier, agent kiln.AgentLabels, slots int, claimKeys func([]string, int) ([]Claimed, error)) ([]Claimed, error) {
	keys, fresh, err := db.keys.get(ctx, q, false)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	tried := acceptedKeys(keys, agent)
	var out []Claimed
	if len(tried) > 0 {
		if out, err = claimKeys(tried, slots); err != nil {
			return nil, err
		}
	}
	if len(out) == slots || fresh {
		return out, nil
	}
	if keys, _, err = db.keys.get(ctx, q, true); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	var extra []string
	for _, k := range acceptedKeys(keys, agent) {
		if !slices.Contains(tried, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) == 0 {
		return out, nil
	}
	more, err := claimKeys(extra, slots-len(out))
	if err != nil {
		return nil, err
	}
	out = append(out, more...)
	sortClaimed(out)
	return out, nil
}

// keyCacheTTL is how long a claim trusts the cached set of queued keys.
const keyCacheTTL = 100 * time.Millisecond

// keyCache holds the distinct queued keys, read with the skip scan.
type keyCache struct {
	// plans is PostgreSQL's (nil on SQLite): a plan of the skip scan
	// cached on an empty queue read every queued job at each step once it
	// filled (7 ms a read, 10,000 queued).
	plans *queuePlans
	mu    sync.Mutex
	keys  []string // never modified once stored
	at    time.Time
}

// get returns the cached keys, or reads them when fresh is asked or the
// cache is older than keyCacheTTL; read reports whether it read them.
func (k *keyCache) get(ctx context.Context, q querier, fresh bool) (keys []string, read bool, err error) {
	k.mu.Lock()
	if !fresh && !k.at.IsZero() && time.Since(k.at) < keyCacheTTL {
		keys = k.keys
		k.mu.Unlock()
		return keys, false, nil
	}
	k.mu.Unlock()
	if err := k.plans.check(ctx, q); err != nil {
		return nil, false, err
	}
	if keys, err = queryStrings(ctx, q, distinctKeysSQL+k.plans.tag()); err != nil {
		return nil, false, err
	}
	k.mu.Lock()
	k.keys, k.at = keys, time.Now()
	k.mu.Unlock()
	return keys, true, nil
}

// pool runs statements on the write pool outside a transaction.
type pool struct{ c *DB }

func (p pool) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return p.c.write.QueryContext(ctx, p.c.bind(q), args...)
}

func (p pool) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return p.c.write.QueryRowContext(ctx, p.c.bind(q), args...)
}

// claimSet is the SET list of a claim; its status comes from mClaim. alias
// prefixes the job's columns; agent is the SQL of the agent id ("?" or a
// joined column).
func claimSet(alias, agent string) string {
	return fmt.Sprintf(`status = '%s', agent_id = %s, lease_epoch = %[3]slease_epoch + 1, attempts = %[3]sattempts + 1,
		dispatched_at = ?, ack_deadline = ?, last_heartbeat_at = ?, last_provisioning_error = NULL,
		pending_reason = NULL, pending_since = NULL, updated_at = ?`, mClaim.to, agent, alias)
}

// claimBranch selects the oldest claimable jobs of one key (SQLite). Its
// LIMIT, like every SQLite claim's, is written +?: SQLite plans a LIMIT
// bound to a bare parameter with the bound value, and compiles the
// statement again whenever that value changes — at every batch of a
// different size (9% of a claim's CPU in BenchmarkClaimFor). The unary
// plus hides the value from the planner.
const claimBranch = `SELECT id FROM jobs WHERE status = 'queued' AND queue_key = ? AND stop = 0
	AND (expires_at IS NULL OR expires_at > ?) ORDER BY id LIMIT +?`

// claimBranchPostgres is claimBranch in the order only the jobs_queued
// index serves (see the migration), so no statistics can turn the claim
// into a walk of the primary key.
const claimBranchPostgres = `SELECT id FROM jobs WHERE status = 'queued' AND queue_key = ? AND stop = 0
	AND (expires_at IS NULL OR expires_at > ?) ORDER BY (id || '') LIMIT ?`

// scanClaimedRuns reads a claim's rows, each ending with whether its run
// is still pending (pending holds the runs that are) and, when agents is
// not nil, then with the agent that claimed the job (agents maps job ids
// to it).
func scanClaimedRuns(rows *sql.Rows, err error, agents map[string]string) (out []Claimed, pending map[string]bool, _ error) {
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	pending = map[string]bool{}
	for rows.Next() {
		var c Claimed
		var spec, key string
		var queued sql.NullInt64
		var runPending bool
		dest := []any{&c.JobID, &c.RunID, &c.Name, &c.Epoch, &c.Attempt, &spec, &key, &queued, &runPending}
		var agent string
		if agents != nil {
			dest = append(dest, &agent)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		if agents != nil {
			agents[c.JobID] = agent
		}
		c.Spec, c.Requirement, c.QueuedAt = json.RawMessage(spec), KeyRequirement(key), fromMS(queued)
		if runPending {
			pending[c.RunID] = true
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	sortClaimed(out)
	return out, pending, nil
}

// dispatchDetail is a claim's timeline entry (claimPostgres writes the
// same words in SQL).
func dispatchDetail(attempt int, agentID string) string {
	return fmt.Sprintf("attempt %d sent to agent %s", attempt, agentID)
}

// sortClaimed orders claims oldest first (ids are UUIDv7, time-ordered);
// RETURNING does not promise an order.
func sortClaimed(cs []Claimed) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].JobID < cs[j].JobID })
}
