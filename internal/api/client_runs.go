package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/kilnci/kiln"
)

// RunFilter selects runs for ListRuns; zero fields do not filter.
type RunFilter struct {
	Status     kiln.RunStatus
	Workflow   string
	Repository string
	Source     string // the source's name
	Branch     string // a branch name or a full ref
	Event      kiln.EventName
	Before     int64 // runs numbered below this (RunList.NextBefore)
	Limit      int
}

// ListRuns lists runs, newest first.
func (c *Client) ListRuns(ctx context.Context, f RunFilter) (RunList, error) {
	q := url.Values{}
	set(q, "status", string(f.Status))
	set(q, "workflow", f.Workflow)
	set(q, "repository", f.Repository)
	set(q, "source", f.Source)
	set(q, "branch", f.Branch)
	set(q, "event", string(f.Event))
	setInt(q, "before", f.Before)
	setInt(q, "limit", int64(f.Limit))
	var out RunList
	_, err := c.do(ctx, "GET", "/api/v1/runs", q, nil, &out)
	return out, err
}

// GetRun returns a run with its jobs and steps; ref is its number or id.
func (c *Client) GetRun(ctx context.Context, ref string) (Run, error) {
	var out Run
	_, err := c.do(ctx, "GET", "/api/v1/runs/"+url.PathEscape(ref), nil, nil, &out)
	return out, err
}

// CancelRun cancels a run: gracefully the first time, forced the second.
func (c *Client) CancelRun(ctx context.Context, ref, reason string) (CancelResult, error) {
	var out CancelResult
	_, err := c.do(ctx, "POST", "/api/v1/runs/"+url.PathEscape(ref)+"/cancel", nil, CancelRequest{Reason: reason}, &out)
	return out, err
}

// ApproveRun lets a run held for approval go and returns it.
func (c *Client) ApproveRun(ctx context.Context, ref string) (Run, error) {
	var out Run
	_, err := c.do(ctx, "POST", "/api/v1/runs/"+url.PathEscape(ref)+"/approve", nil, nil, &out)
	return out, err
}

// RerunRun starts a new run of a finished one and returns it.
func (c *Client) RerunRun(ctx context.Context, ref string, failedOnly bool) (Run, error) {
	var out Run
	_, err := c.do(ctx, "POST", "/api/v1/runs/"+url.PathEscape(ref)+"/rerun", nil, RerunRequest{FailedOnly: failedOnly}, &out)
	return out, err
}

// WaitRun reads a run every second until it finished, calling progress
// (if not nil) each time, and returns it finished.
func (c *Client) WaitRun(ctx context.Context, ref string, progress func(Run)) (Run, error) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		run, err := c.GetRun(ctx, ref)
		if err != nil {
			return run, err
		}
		if progress != nil {
			progress(run)
		}
		if run.Status.Terminal() {
			return run, nil
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-t.C:
		}
	}
}

// LogQuery selects log lines: a job (name or id; "" is every job), a step
// (nil is every step), lines after a seq (with Job and Step), at most Limit
// lines (without Follow), and whether to follow live lines until the jobs
// finish.
type LogQuery struct {
	Job    string
	Step   *int
	After  uint64
	Limit  int
	Follow bool
	// Idle, when set, is called whenever every line received so far has
	// been handed over and the stream has no more waiting: where a
	// follower flushes its output, once per burst rather than per line.
	Idle func() error
}

// Logs streams a run's log lines to fn, in order per step, until the
// history is sent (or, following, until every job in scope finished). An
// error from fn stops the stream and is returned.
func (c *Client) Logs(ctx context.Context, run string, q LogQuery, fn func(LogLine) error) error {
	return c.LogsRaw(ctx, run, q, decodingEach(fn))
}

// decodingEach is fn behind a decoder of raw lines.
func decodingEach(fn func(LogLine) error) func([]byte) error {
	return func(line []byte) error {
		l, err := decodeLogLine(line)
		if err != nil {
			return kiln.Errorf(kiln.CodeInternal, "the server sent a log line kiln cannot read: %v", err)
		}
		return fn(l)
	}
}

// LogsRaw is Logs without decoding: fn gets each line as the server sent it
// (one JSON object, the LogLine's fields, without its newline), valid only
// until fn returns. For a client that passes lines on, or counts them.
func (c *Client) LogsRaw(ctx context.Context, run string, q LogQuery, fn func(line []byte) error) error {
	v := url.Values{}
	set(v, "job", q.Job)
	if q.Step != nil {
		v.Set("step", strconv.Itoa(*q.Step))
	}
	setInt(v, "after", int64(q.After))
	setInt(v, "limit", int64(q.Limit))
	if q.Follow {
		v.Set("follow", "true")
	}
	resp, err := c.request(ctx, "GET", "/api/v1/runs/"+url.PathEscape(run)+"/logs", v, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readLines(ctx, bufio.NewReaderSize(resp.Body, 64<<10), fn, q.Idle)
}

// maxLineBytes bounds one NDJSON line the client accepts.
const maxLineBytes = 4 << 20

// readLines splits NDJSON log lines. A last line without its newline means
// the stream was cut (the server dropped it, or the connection broke).
func readLines(ctx context.Context, br *bufio.Reader, fn func([]byte) error, idle func() error) error {
	var line []byte
	for {
		if idle != nil && len(line) == 0 && br.Buffered() == 0 {
			if err := idle(); err != nil {
				return err
			}
		}
		chunk, err := br.ReadSlice('\n')
		if err == nil && len(line) == 0 {
			// The whole line is in the reader's buffer: no copy.
			if err := fn(chunk[:len(chunk)-1]); err != nil {
				return err
			}
			continue
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > maxLineBytes {
				return kiln.Errorf(kiln.CodeTooLarge, "the server sent a log line longer than %d bytes", maxLineBytes)
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return nil
			}
			return kiln.Errorf(kiln.CodeUnavailable, "the log stream was cut before it ended")
		}
		if err := fn(line[:len(line)-1]); err != nil {
			return err
		}
		line = line[:0]
	}
}

// FollowLogs streams a run's log lines (of one job, or every job when job
// is "") from the start, then live, until the jobs finished.
func (c *Client) FollowLogs(ctx context.Context, run, job string, fn func(LogLine) error) error {
	return c.Logs(ctx, run, LogQuery{Job: job, Follow: true}, fn)
}

// Dispatch starts a workflow by hand. wait: wait (up to the server's bound)
// for the dispatch to be processed, and return its outcome and runs.
func (c *Client) Dispatch(ctx context.Context, r DispatchRequest, wait bool) (Delivery, error) {
	var out Delivery
	_, err := c.do(ctx, "POST", "/api/v1/dispatch", waitQuery(wait), r, &out)
	return out, err
}

// Trigger tells the server a local source's ref moved.
func (c *Client) Trigger(ctx context.Context, source string, r TriggerRequest, wait bool) (Delivery, error) {
	var out Delivery
	_, err := c.do(ctx, "POST", "/api/v1/sources/"+url.PathEscape(source)+"/trigger", waitQuery(wait), r, &out)
	return out, err
}

// EventFilter selects event-log rows; zero fields do not filter.
type EventFilter struct {
	Source string // source name
	Status string
	Before int64
	Limit  int
}

// Events lists the event log, newest first.
func (c *Client) Events(ctx context.Context, f EventFilter) (DeliveryList, error) {
	q := url.Values{}
	set(q, "source", f.Source)
	set(q, "status", f.Status)
	setInt(q, "before", f.Before)
	setInt(q, "limit", int64(f.Limit))
	var out DeliveryList
	_, err := c.do(ctx, "GET", "/api/v1/events", q, nil, &out)
	return out, err
}

// Event returns one event-log row with its body and runs.
func (c *Client) Event(ctx context.Context, id int64) (Delivery, error) {
	var out Delivery
	_, err := c.do(ctx, "GET", fmt.Sprintf("/api/v1/events/%d", id), nil, nil, &out)
	return out, err
}

func waitQuery(wait bool) url.Values {
	if !wait {
		return nil
	}
	return url.Values{"wait": {"true"}}
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

func setInt(q url.Values, k string, v int64) {
	if v != 0 {
		q.Set(k, strconv.FormatInt(v, 10))
	}
}
