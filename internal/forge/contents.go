package forge

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/kilnci/kiln"
)

// The contents API is the same on GitHub and Gitea: a directory is a JSON
// array of entries, a file one object with base64 content.

// fileContent is one answer of the contents API for a file.
type fileContent struct {
	Type     string `json:"type"` // file, dir, symlink, submodule
	Name     string `json:"name"`
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Encoding string `json:"encoding"` // base64; GitHub says "none" for files over 1 MB
	Content  string `json:"content"`
}

// contentEntry is a directory entry both forges' contents APIs return.
type contentEntry struct {
	Type string `json:"type"`
	Name string `json:"name"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	SHA  string `json:"sha"` // the file's git blob id
}

// readContentsWorkflows reads the workflow files of repo at sha through the
// contents API, which GitHub and Gitea share: the directory's listing, then
// each file blobs does not hold.
func readContentsWorkflows(ctx context.Context, api *apiClient, blobs *blobCache, maxBytes int64, repo, sha string) ([]WorkflowFile, error) {
	rp, err := repoPath(repo)
	if err != nil {
		return nil, err
	}
	if err := checkSHA(sha); err != nil {
		return nil, err
	}
	q := url.Values{"ref": {sha}}
	var raw json.RawMessage
	_, err = api.do(ctx, request{method: http.MethodGet, path: rp + "/contents/" + WorkflowDir, query: q}, &raw)
	if kiln.ErrorCode(err) == kiln.CodeNotFound {
		// No workflow directory, or no repository the token can see:
		// only the first is "no workflows".
		return nil, api.checkRepo(ctx, rp)
	}
	if err != nil {
		return nil, err
	}
	entries, err := contentListing(raw)
	if err != nil {
		return nil, err
	}
	return readWorkflows(entries, maxBytes, func(e contentEntry) ([]byte, error) {
		if b, ok := blobs.get(repo, e.SHA); ok && int64(len(b)) <= maxBytes {
			return slices.Clone(b), nil
		}
		var f fileContent
		if _, err := api.do(ctx, request{method: http.MethodGet, path: rp + "/contents/" + escapePath(e.Path), query: q}, &f); err != nil {
			return nil, err
		}
		f.Path = e.Path
		b, err := decodeContent(f, maxBytes)
		if err == nil {
			blobs.put(repo, e.SHA, slices.Clone(b))
		}
		return b, err
	})
}

// contentListing decodes a contents answer for the workflow directory: an
// array when it is a directory.
func contentListing(raw json.RawMessage) ([]contentEntry, error) {
	if t := strings.TrimSpace(string(raw)); !strings.HasPrefix(t, "[") {
		return []contentEntry{{Type: "notdir", Path: WorkflowDir}}, nil
	}
	var entries []contentEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "the forge listed %s in an unexpected format", WorkflowDir)
	}
	return entries, nil
}

// maxParallelFetches bounds the file reads one workflow listing runs at
// once: each is a round trip to the forge (~100 ms to github.com), so a
// repository's files are read side by side rather than one after another,
// without opening a connection per file of a large directory.
const maxParallelFetches = 8

// readWorkflows picks the workflow files out of a directory listing and
// reads each with fetch (concurrently; fetch must allow that), turning
// unusable ones into error entries.
func readWorkflows(entries []contentEntry, maxBytes int64, fetch func(contentEntry) ([]byte, error)) ([]WorkflowFile, error) {
	if err := checkWorkflowCount(entries); err != nil {
		return nil, err
	}
	var out []WorkflowFile
	var toFetch []int // indexes into out, with their entries in fetching
	var fetching []contentEntry
	for _, e := range entries {
		if e.Type == "notdir" {
			return []WorkflowFile{{Path: WorkflowDir, Err: kiln.Errorf(kiln.CodeInvalid, "%s is not a directory", WorkflowDir)}}, nil
		}
		if !isWorkflowFile(e.Name) || e.Type == "dir" || e.Type == "submodule" {
			continue
		}
		p := WorkflowDir + "/" + e.Name
		switch {
		case e.Type == "symlink":
			out = append(out, WorkflowFile{Path: p, Err: kiln.Errorf(kiln.CodeInvalid, "%s is a symbolic link; workflow files must be regular files", p)})
		case e.Type != "file":
			continue
		case e.Size > maxBytes:
			out = append(out, WorkflowFile{Path: p, Err: fileTooLarge(p, e.Size, maxBytes)})
		default:
			toFetch = append(toFetch, len(out))
			fetching = append(fetching, e)
			out = append(out, WorkflowFile{Path: p})
		}
	}
	var g errgroup.Group
	g.SetLimit(maxParallelFetches)
	for i, at := range toFetch {
		g.Go(func() error {
			b, err := fetch(fetching[i])
			var fe *fileError
			switch {
			case errors.As(err, &fe):
				out[at].Err = fe.err
			case err != nil:
				return err
			default:
				out[at].Content = b
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b WorkflowFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// checkWorkflowCount refuses a directory with more workflow files than
// kiln reads, before any is downloaded.
func checkWorkflowCount(entries []contentEntry) error {
	n := 0
	for _, e := range entries {
		if isWorkflowFile(e.Name) && (e.Type == "file" || e.Type == "symlink") {
			n++
		}
	}
	if n > DefaultMaxWorkflowFiles {
		return kiln.Errorf(kiln.CodeTooLarge, "%s holds %d workflow files, more than the %d kiln reads", WorkflowDir, n, DefaultMaxWorkflowFiles)
	}
	return nil
}

// fileError marks a per-file problem that becomes an error entry rather
// than failing the whole read.
type fileError struct{ err error }

func (e *fileError) Error() string { return e.err.Error() }

func fileTooLarge(p string, size, limit int64) error {
	return kiln.Errorf(kiln.CodeTooLarge, "%s is %s, over the %s limit for a workflow file", p, sizeString(size), sizeString(limit))
}

// decodeContent decodes a contents-API file answer.
func decodeContent(f fileContent, maxBytes int64) ([]byte, error) {
	if f.Size > maxBytes || f.Encoding == "none" {
		return nil, &fileError{fileTooLarge(f.Path, f.Size, maxBytes)}
	}
	if f.Encoding != "base64" {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "the forge sent %s in encoding %q, not base64", f.Path, f.Encoding)
	}
	clean := strings.NewReplacer("\n", "", "\r", "").Replace(f.Content)
	b, err := base64.StdEncoding.DecodeString(clean)
	if err != nil {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "the forge sent %s with invalid base64 content", f.Path)
	}
	if int64(len(b)) > maxBytes {
		return nil, &fileError{fileTooLarge(f.Path, int64(len(b)), maxBytes)}
	}
	return b, nil
}

// shortRef accepts "main", "refs/heads/main", "v1", "refs/tags/v1" and
// returns the name GitHub's and Gitea's commit lookups take.
func shortRef(ref string) (string, error) {
	name := strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/tags/")
	if !validRefName(name) {
		return "", kiln.Errorf(kiln.CodeInvalid, "ref %q is not a valid branch, tag or commit", ref)
	}
	return name, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
