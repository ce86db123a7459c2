package fleet

import "time"

// clusterReasonDelay is how long a coordinator sharing its database holds
// back the pending reasons of jobs it just queued and published to the
// others. Writing a reason locks the key's queued rows for the length of a
// commit, and a claim skips locked rows (SKIP LOCKED): written at once, it
// made the claim of the coordinator the wake-up reached come up short, and
// that coordinator's agent got the job only on its retry, 10–20 ms later
// (measured with kiln bench --scenario cluster; docs/bench.md). By the
// time the reasons are written the job is usually claimed, and the
// compare-and-set on queued rows then touches nothing. The jobs show the
// generic reason they were queued with meanwhile.
const clusterReasonDelay = 100 * time.Millisecond

// explainLater has the waiting keys' pending reasons written by a pass
// clusterReasonDelay from now (one timer at a time: the pass writes every
// waiting key's reason). The scaler is woken now, as explain would.
func (d *dispatcher) explainLater(live map[string]bool) {
	if len(live) > 0 && d.f.cfg.Scaler != nil {
		d.f.cfg.Scaler.Wake()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reasonsLater {
		return
	}
	d.reasonsLater = true
	time.AfterFunc(clusterReasonDelay, func() {
		d.mu.Lock()
		d.reasonsLater, d.reasonsDue = false, true
		d.mu.Unlock()
		d.signal()
	})
}

// retryShortAfter is the wait before the n-th retry of a pass whose claim
// came up short (retryShort): 2, 4, 8, 16, 32 ms. The rows it skipped are
// usually held by a transaction that commits within milliseconds.
func retryShortAfter(n int) time.Duration {
	return (2 * time.Millisecond) << min(max(n-1, 0), 4)
}
