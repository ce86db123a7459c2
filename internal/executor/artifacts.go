package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/kilnci/kiln/internal/tarball"
)

// Artifact is a set of files the job uploads after its steps: Name is a
// template rendered with the step contexts, Paths globs relative to the
// workspace ("!glob" excludes; a directory brings everything under it).
type Artifact struct {
	Name  string
	Paths []string
}

// Transfer moves a job's artifacts through the orchestrator: the agent
// holds no storage credentials. Bodies are gzipped tar streams.
type Transfer interface {
	// Upload stores the artifact name of this job from body.
	Upload(ctx context.Context, name string, body io.Reader) error
	// Fetchable names the artifacts the job's direct needs uploaded.
	Fetchable(ctx context.Context) ([]string, error)
	// Download opens one of them.
	Download(ctx context.Context, name string) (io.ReadCloser, error)
}

// fetchArtifacts unpacks the artifacts of the job's direct needs into the
// workspace before its first step; a failure fails the job.
func (e *Execution) fetchArtifacts(js *jobState) {
	t := e.job.Transfer
	if t == nil || js.failed || e.isCancelled() {
		return
	}
	ctx := e.stopCtx
	names, err := t.Fetchable(ctx)
	if err != nil {
		js.setup.notice("artifacts of the needs: %v", err)
		js.fail("fetching the needs' artifacts failed: " + err.Error())
		return
	}
	for _, name := range names {
		files, size, err := e.fetchOne(ctx, t, name, js.ws.dir)
		if err != nil {
			js.setup.notice("artifact %q: %v", name, err)
			js.fail(fmt.Sprintf("fetching artifact %q failed: %v", name, err))
			return
		}
		js.setup.notice("artifact %q: %d files (%s) unpacked into the workspace", name, files, formatBytes(size))
	}
}

func (e *Execution) fetchOne(ctx context.Context, t Transfer, name, dir string) (files int, size int64, err error) {
	body, err := t.Download(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	defer body.Close()
	return tarball.Unpack(body, dir)
}

// uploadArtifacts packs and uploads the job's artifacts, whatever its
// result (not after a forced cancel); a path matching nothing is a warning,
// a failed upload fails the job.
func (e *Execution) uploadArtifacts(js *jobState) {
	t := e.job.Transfer
	if t == nil || len(e.job.Artifacts) == 0 || e.isForced() {
		return
	}
	env := &evalEnv{contexts: e.contexts(js, js.env), status: js.status(), hashFiles: hashFilesIn(js.ws.dir)}
	for _, a := range e.job.Artifacts {
		name, err := renderTemplate(a.Name, env)
		if err == nil {
			err = checkArtifactName(name)
		}
		if err != nil {
			js.setup.notice("artifact %q: name: %v", a.Name, err)
			js.fail(fmt.Sprintf("artifact %q: name: %v", a.Name, err))
			continue
		}
		files, unmatched, err := collect(js.ws.dir, a.Paths)
		for _, p := range unmatched {
			js.setup.notice("warning: artifact %q: path %q matched no file", name, p)
		}
		if err == nil && len(files) == 0 {
			js.setup.notice("warning: artifact %q: no files to upload", name)
			continue
		}
		if err == nil {
			err = e.uploadOne(t, name, js.ws.dir, files)
		}
		if err != nil {
			js.setup.notice("artifact %q: upload failed: %v", name, err)
			js.fail(fmt.Sprintf("artifact %q: upload failed: %v", name, err))
			continue
		}
		js.setup.notice("artifact %q: %d files uploaded", name, len(files))
	}
}

// uploadOne streams the tar.gz of files straight into the upload: nothing
// is held whole in memory or on disk.
func (e *Execution) uploadOne(t Transfer, name, dir string, files []string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.Pack(pw, dir, files)) }()
	err := t.Upload(e.stopCtx, name, pr)
	pr.CloseWithError(errors.New("upload ended"))
	return err
}

// checkArtifactName applies the server's rules to a rendered name.
func checkArtifactName(s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errors.New("renders empty")
	case len(s) > 255:
		return errors.New("is longer than 255 bytes")
	case s == "." || s == "..":
		return errors.New(`must not be "." or ".."`)
	case strings.ContainsAny(s, "/\\"):
		return errors.New("must not hold / or \\")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return errors.New("holds a control character")
		}
	}
	return nil
}

// collect returns the regular files the patterns select under dir
// (slash-separated, sorted), and the include patterns that matched nothing.
func collect(dir string, patterns []string) (files, unmatched []string, err error) {
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
	add := func(p string) {
		if !seen[p] && !excluded(p, exclude) {
			seen[p] = true
			files = append(files, p)
		}
	}
	for _, p := range include {
		if !doublestar.ValidatePattern(p) {
			return nil, nil, fmt.Errorf("%q is not a valid pattern", p)
		}
		matches, err := doublestar.Glob(fsys, p, doublestar.WithNoFollow())
		if err != nil {
			return nil, nil, err
		}
		found := false
		for _, m := range matches {
			err := fs.WalkDir(fsys, m, func(q string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.Type().IsRegular() {
					found = true
					add(q)
				}
				return nil
			})
			if err != nil {
				return nil, nil, err
			}
		}
		if !found {
			unmatched = append(unmatched, p)
		}
	}
	slices.Sort(files)
	return files, unmatched, nil
}

// cleanPattern drops a leading "./", as GitHub's globs do.
func cleanPattern(p string) string {
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	if p == "" || p == "." {
		return "**"
	}
	return p
}
