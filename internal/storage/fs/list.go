package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kilnci/kiln/internal/storage"
)

// List implements storage.Backend. It walks the key tree depth first,
// visiting each directory's entries in the order of the keys they hold (a
// directory d sorts as "d/", so "a-b" comes before "a/c" as in S3), and
// descends only into directories that can hold keys with the prefix and
// after the cursor: a page costs the directories on its way, not the
// whole tree.
func (b *Backend) List(ctx context.Context, prefix, after string, limit int) ([]storage.Object, bool, error) {
	if err := storage.CheckPrefix(prefix); err != nil {
		return nil, false, err
	}
	if limit <= 0 {
		return nil, false, fmt.Errorf("storage fs: list limit %d", limit)
	}
	w := walker{ctx: ctx, prefix: prefix, after: after, limit: limit}
	err := w.dir(b.objects, "")
	if errors.Is(err, errPageFull) {
		return w.out, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage fs: list %q: %w", prefix, err)
	}
	return w.out, false, nil
}

var errPageFull = errors.New("page full")

type walker struct {
	ctx           context.Context
	prefix, after string
	limit         int
	out           []storage.Object
}

// entry is a directory entry as a key (name) or a key prefix (name + "/").
type entry struct {
	sortKey string
	dir     bool
}

// dir lists the keys under path, whose keys all start with keyPrefix.
func (w *walker) dir(path, keyPrefix string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	des, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // removed by a Delete meanwhile
	}
	if err != nil {
		return err
	}
	entries := make([]entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		switch {
		case de.IsDir():
			entries = append(entries, entry{sortKey: keyPrefix + name + "/", dir: true})
		case strings.HasSuffix(name, metaSuffix):
			entries = append(entries, entry{sortKey: keyPrefix + strings.TrimSuffix(name, metaSuffix)})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.sortKey, b.sortKey) })
	for _, e := range entries {
		if e.dir {
			if !w.mayHold(e.sortKey) {
				continue
			}
			if err := w.dir(filepath.Join(path, filepath.FromSlash(strings.TrimPrefix(e.sortKey, keyPrefix))), e.sortKey); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(e.sortKey, w.prefix) || e.sortKey <= w.after {
			continue
		}
		s, err := readSidecar(filepath.Join(path, strings.TrimPrefix(e.sortKey, keyPrefix)+metaSuffix))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		if len(w.out) == w.limit {
			return errPageFull
		}
		w.out = append(w.out, s.object(e.sortKey, false))
	}
	return nil
}

// mayHold reports whether keys starting with dirKey (which ends in "/")
// can match the prefix and come after the cursor.
func (w *walker) mayHold(dirKey string) bool {
	if !strings.HasPrefix(dirKey, w.prefix) && !strings.HasPrefix(w.prefix, dirKey) {
		return false
	}
	// Every key under dirKey is greater than dirKey itself; all of them
	// are at most after only when after is past the whole subtree.
	return w.after < dirKey || strings.HasPrefix(w.after, dirKey)
}
