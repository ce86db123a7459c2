package retention

import (
	"context"
	"errors"
)

// The local pass. Each server keeps in its own data_dir/logs the step logs
// of the agents connected to it, and only the leader purges runs: its
// purge removes the run's archived segments and its own files, not the
// files other servers wrote. So every server, leader or not, sweeps its own
// log directory, bounded per pass.

// LocalPass removes this server's own log files that are no longer needed
// and says how many run directories it removed. It looks at no more than
// Batch of the server's run directories, from where the previous pass
// stopped (wrapping around at the end), so a large directory is covered
// over several passes and one pass costs two indexed reads of the
// database. A run the garbage collector purged (store purged_runs) loses
// its directory. With shared storage, a run that finished LocalGrace ago
// loses the step files whose every line is in the archive, where every
// server reads them. A run the database knows neither way — logs of
// another database's runs, a server pointed at the wrong one — is left
// alone.
func (c *Collector) LocalPass(ctx context.Context) (int, error) {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	ids, err := c.logs.LocalRuns(c.cursor, c.cfg.Batch)
	if err != nil {
		return 0, err
	}
	if len(ids) < c.cfg.Batch {
		c.cursor = "" // the end: the next pass starts again
	} else {
		c.cursor = ids[len(ids)-1]
	}
	if len(ids) == 0 {
		return 0, nil
	}
	fates, err := c.db.Retention().RunFates(ctx, ids)
	if err != nil {
		return 0, err
	}
	now := c.cfg.Clock()
	removed := 0
	var errs []error
	for _, id := range ids {
		f, known := fates[id]
		switch {
		case !known:
		case f.Purged:
			if err := c.logs.RemoveLocalRun(id); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
		case f.Finished && c.logs.Shared() && now.Sub(f.FinishedAt) >= c.cfg.LocalGrace:
			kept, err := c.logs.RemoveShipped(ctx, id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if kept == 0 {
				removed++
			}
		}
	}
	if removed > 0 {
		c.cfg.Logger.Info("retention: removed this server's own log files", "runs", removed)
		if c.cfg.Hooks.Deleted != nil {
			c.cfg.Hooks.Deleted(KindLocalLogs, removed)
		}
	}
	return removed, errors.Join(errs...)
}
