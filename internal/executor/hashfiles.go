package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/bmatcuk/doublestar/v4"
)

// hashFilesIn returns hashFiles() for a workspace: the SHA-256, in hex, of
// the SHA-256 of every regular file matching the patterns (globs relative
// to the workspace; "!pattern" excludes), in path order; "" when nothing
// matches. That is GitHub's definition, so cache keys read the same. As
// on GitHub a pattern may start with "./" ('./go.sum', '!./vendor/**'):
// the glob matcher would match nothing with it, so it is dropped.
func hashFilesIn(dir string) func([]string) (string, error) {
	return func(patterns []string) (string, error) {
		fsys := os.DirFS(dir)
		var include, exclude []string
		for _, p := range patterns {
			if rest, ok := strings.CutPrefix(p, "!"); ok {
				exclude = append(exclude, cleanPattern(rest))
			} else {
				include = append(include, cleanPattern(p))
			}
		}
		seen := map[string]bool{}
		var files []string
		for _, p := range include {
			if !doublestar.ValidatePattern(p) {
				return "", fmt.Errorf("hashFiles: %q is not a valid pattern", p)
			}
			matches, err := doublestar.Glob(fsys, p, doublestar.WithFilesOnly(), doublestar.WithNoFollow())
			if err != nil {
				return "", fmt.Errorf("hashFiles: %v", err)
			}
			for _, m := range matches {
				if !seen[m] && !excluded(m, exclude) {
					seen[m] = true
					files = append(files, m)
				}
			}
		}
		if len(files) == 0 {
			return "", nil
		}
		slices.Sort(files)
		outer := sha256.New()
		for _, f := range files {
			sum, err := hashFile(filepath.Join(dir, filepath.FromSlash(f)))
			if err != nil {
				return "", fmt.Errorf("hashFiles: %s: %v", filepath.ToSlash(f), err)
			}
			outer.Write(sum)
		}
		return hex.EncodeToString(outer.Sum(nil)), nil
	}
}

func excluded(path string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := doublestar.Match(p, path); ok {
			return true
		}
	}
	return false
}

// hashFile hashes a regular file. A step may have made the name a FIFO
// (opening it would wait for a writer forever) or a symlink after the
// glob saw a file: it is opened without following a symlink or waiting,
// and refused unless it is still a regular file.
func hashFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file but a %s", fileKind(fi.Mode()))
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
