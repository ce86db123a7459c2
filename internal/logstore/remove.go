package logstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// RemoveRun deletes a finished run's logs (retention): this server's files
// and, with an archive, the segments shipped to it. Other servers' files
// of the run stay until their own local pass finds the run purged
// (RemoveLocalRun; docs/storage.md#retention).
func (s *Store) RemoveRun(ctx context.Context, runID string) error {
	if !validID(runID) {
		return fmt.Errorf("logstore: invalid run id %q", runID)
	}
	if s.archive != nil {
		for {
			objs, _, err := s.archive.List(ctx, ArchivePrefix(runID), "", 1000)
			if err != nil {
				return err
			}
			if len(objs) == 0 {
				break
			}
			for _, o := range objs {
				if err := s.archive.Delete(ctx, o.Key); err != nil {
					return err
				}
			}
		}
	}
	s.forget(func(r Ref) bool { return r.RunID == runID })
	return os.RemoveAll(filepath.Join(s.dir, runID))
}
