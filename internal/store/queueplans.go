package store

import (
	"context"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
)

// queuePlans keeps PostgreSQL's cached plans of the queue's statements (the
// claim, the keys' skip scan) made with a jobs table of about the size they
// run on. pgx prepares a statement once per connection, and PostgreSQL
// then keeps one generic plan for it after five executions, made with the
// tables as they were: agents claim as they connect, on an empty queue, and
// the plan made then (a sequential scan of a one-page table) read every
// row at each claim once the queue filled — 461 ms for 65 jobs with 10,240
// queued, until autovacuum's ANALYZE invalidated it. So the statements'
// text carries the table's size class (a comment: its size in pages,
// rounded down to a power of two), and each class is prepared and planned
// anew. From largeJobsPages on the class stops changing: a plan that reads
// the table whole is then one the planner priced against the index paths
// on a table of that size (a claim of many jobs on a few thousand), not a
// one-page table's, and autovacuum's ANALYZE, at every tenth of growth,
// replaces the cached plans as the table grows.
//
// Planning the claim at every execution instead (pgx's unnamed statements)
// cost PostgreSQL ~0.7 ms a claim (parse 0.4, plan 0.5 ms against 0.3 to
// execute it), which lengthened the claim's tail at 1,000 agents and the
// webhook's path.
type queuePlans struct {
	class   atomic.Int32 // bits.Len of the table's pages, at most largeClass
	checked atomic.Int64 // when check last read the size, Unix nanoseconds
}

// largeJobsPages is the size of the jobs table (8 KiB pages: about 3,500
// jobs) from which its class no longer changes. The plan tests hold that
// on tables of this size and more, whatever the statistics, the claim's
// scan and update take the right indexes among the index paths.
const largeJobsPages = 128

var largeClass = int32(bits.Len(largeJobsPages))

// classTags are the comments that end the queue's statements, per class.
var classTags = func() []string {
	tags := make([]string, largeClass+1)
	for c := range tags {
		tags[c] = fmt.Sprintf(" /* jobs: class %d */", c)
	}
	return tags
}()

// tag ends a queue statement's text: "" on SQLite (p is nil).
func (p *queuePlans) tag() string {
	if p == nil {
		return ""
	}
	return classTags[p.class.Load()]
}

// check reads the jobs table's size until it is large, with a read of the
// queued keys and at most once per keyCacheTTL (a claim that comes up
// short rereads the keys at once: it need not read the size again). A
// table's file does not shrink under retention's deletes (their pages take
// new rows), and a class read lower later would only select plans made on
// a smaller table.
func (p *queuePlans) check(ctx context.Context, q querier) error {
	if p == nil || p.class.Load() == largeClass {
		return nil
	}
	now := time.Now().UnixNano()
	if last := p.checked.Load(); last != 0 && now-last < int64(keyCacheTTL) || !p.checked.CompareAndSwap(last, now) {
		return nil
	}
	var pages uint64
	if err := q.queryRow(ctx, "SELECT pg_relation_size('jobs') / current_setting('block_size')::bigint").Scan(&pages); err != nil {
		return fmt.Errorf("size of jobs: %w", err)
	}
	p.class.Store(int32(min(bits.Len64(pages), int(largeClass))))
	return nil
}
