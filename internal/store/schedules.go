package store

import (
	"context"
	"fmt"
	"time"
)

// Schedule is one cron trigger of a workflow on a repository's default
// branch, registered when a push to that branch was processed.
type Schedule struct {
	Source       string
	Repository   string
	File         string // .kiln/workflows/nightly.yml
	Hash         string // the workflow's content hash (workflow_definitions)
	Content      []byte // given to ReplaceSchedules; not read back
	Cron         string
	Timezone     string
	Branch       string
	SHA          string
	CloneURL     string
	RegisteredAt time.Time
}

// Key identifies the schedule's fires (Cluster().ClaimCronFire).
func (s Schedule) Key() string {
	return s.Source + "|" + s.Repository + "|" + s.File + "|" + s.Cron + "|" + s.Timezone
}

// ReplaceSchedules makes list the schedules of a repository of a source,
// dropping the ones its default branch no longer declares.
func (c Cluster) ReplaceSchedules(ctx context.Context, source, repository string, list []Schedule) error {
	return c.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		if _, err := t.exec(ctx, "DELETE FROM schedules WHERE source = ? AND repository = ?", source, repository); err != nil {
			return fmt.Errorf("replace schedules: %w", err)
		}
		for _, s := range list {
			if len(s.Content) > 0 {
				if _, err := t.exec(ctx, "INSERT INTO workflow_definitions (hash, content, created_at) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING",
					s.Hash, string(s.Content), now); err != nil {
					return fmt.Errorf("store workflow definition: %w", err)
				}
			}
			if _, err := t.exec(ctx, `INSERT INTO schedules (source, repository, workflow_file, workflow_hash, cron, timezone, branch, sha, clone_url, registered_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
				source, repository, s.File, s.Hash, s.Cron, s.Timezone, s.Branch, s.SHA, s.CloneURL, now); err != nil {
				return fmt.Errorf("replace schedules: %w", err)
			}
		}
		return nil
	})
}

// Schedules lists every registered schedule.
func (c Cluster) Schedules(ctx context.Context) ([]Schedule, error) {
	rows, err := c.h.reader().query(ctx, `SELECT source, repository, workflow_file, workflow_hash, cron, timezone, branch, sha, clone_url, registered_at
		FROM schedules ORDER BY source, repository, workflow_file, cron`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		var s Schedule
		var reg int64
		if err := rows.Scan(&s.Source, &s.Repository, &s.File, &s.Hash, &s.Cron, &s.Timezone, &s.Branch, &s.SHA, &s.CloneURL, &reg); err != nil {
			return nil, err
		}
		s.RegisteredAt = time.UnixMilli(reg).UTC()
		out = append(out, s)
	}
	return out, rows.Err()
}
