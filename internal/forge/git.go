package forge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
)

// Bounds on git output kiln reads.
const (
	gitMaxListing = 4 << 20 // ls-tree, diff --name-only
	gitMaxSmall   = 64 << 10
	gitMaxStderr  = 4 << 10
)

var errGitOutputTooLarge = errors.New("git output over the limit")

// gitRepo runs git against one repository directory (bare or not).
type gitRepo struct {
	git string
	dir string
	env []string // extra environment (credentials for fetches)
}

// run runs git with args and returns at most limit bytes of its stdout;
// more is errGitOutputTooLarge. The environment is the server's minus
// anything GIT_* that could point git elsewhere, and git never prompts.
func (g gitRepo) run(ctx context.Context, limit int64, args ...string) ([]byte, error) {
	return g.runStdin(ctx, nil, limit, args...)
}

// runStdin is run with stdin.
func (g gitRepo) runStdin(ctx context.Context, stdin io.Reader, limit int64, args ...string) ([]byte, error) {
	full := append([]string{"-C", g.dir, "-c", "safe.directory=" + g.dir}, args...)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.git, full...)
	cmd.Env = append(gitEnv(), g.env...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: gitMaxStderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w", args[0], err)
	}
	if err := cmd.Start(); err != nil {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "could not run git: %v", err)
	}
	b, rerr := io.ReadAll(io.LimitReader(out, limit+1))
	if int64(len(b)) > limit {
		cancel()
		_ = cmd.Wait()
		return nil, errGitOutputTooLarge
	}
	werr := cmd.Wait()
	switch {
	case werr != nil && ctx.Err() != nil:
		return nil, kiln.Errorf(kiln.CodeUnavailable, "git %s did not finish in time", args[0])
	case werr != nil:
		return nil, &gitError{args: args, stderr: firstLine(stderr.String()), err: werr}
	case rerr != nil:
		return nil, fmt.Errorf("git %s: %w", args[0], rerr)
	}
	return b, nil
}

// gitError is a git command that failed; its message is git's first line.
type gitError struct {
	args   []string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", e.args[0], e.err, e.stderr)
}

// gitEnv is the server's environment minus the variables that would make
// git work on another repository or take configuration kiln did not give
// it (a server started from a git hook inherits GIT_DIR, for one). The
// rest (GIT_SSH_COMMAND, GIT_SSL_CAINFO, proxies) is the operator's to set.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if gitEnvDenied(name) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
}

func gitEnvDenied(name string) bool {
	switch name {
	case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
		"GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_QUARANTINE_PATH", "GIT_PREFIX", "GIT_CEILING_DIRECTORIES",
		"GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS", "LC_ALL":
		return true
	}
	return strings.HasPrefix(name, "GIT_CONFIG_KEY_") || strings.HasPrefix(name, "GIT_CONFIG_VALUE_")
}

// commit resolves rev to a full commit id, or returns ok=false when the
// repository has no such commit.
func (g gitRepo) commit(ctx context.Context, rev string) (string, bool, error) {
	out, err := g.run(ctx, gitMaxSmall, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	var ge *gitError
	if errors.As(err, &ge) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return strings.TrimSpace(string(out)), true, nil
}

// workflows reads the workflow files at sha with two git processes: one
// listing (with sizes, so big files are never read) and one batch read of
// the files kept.
func (g gitRepo) workflows(ctx context.Context, sha string, maxBytes int64) ([]WorkflowFile, error) {
	if err := checkSHA(sha); err != nil {
		return nil, err
	}
	out, err := g.run(ctx, gitMaxListing, "ls-tree", "-z", "-l", sha+"^{commit}", "--", WorkflowDir+"/")
	var ge *gitError
	if errors.As(err, &ge) {
		if _, ok, cerr := g.commit(ctx, sha); cerr == nil && !ok {
			return nil, kiln.Errorf(kiln.CodeNotFound, "commit %s is not in the repository", sha)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list %s at %s: %w", WorkflowDir, sha, err)
	}
	entries, oids := parseLsTree(out)
	if err := checkWorkflowCount(entries); err != nil {
		return nil, err
	}
	var want []string
	var total int64
	for _, e := range entries {
		if e.Type == "file" && isWorkflowFile(e.Name) && e.Size <= maxBytes {
			want = append(want, oids[e.Path])
			total += e.Size
		}
	}
	blobs, err := g.catBlobs(ctx, want, total)
	if err != nil {
		return nil, fmt.Errorf("read %s at %s: %w", WorkflowDir, sha, err)
	}
	return readWorkflows(entries, maxBytes, func(e contentEntry) ([]byte, error) {
		b, ok := blobs[oids[e.Path]]
		if !ok {
			return nil, fmt.Errorf("git did not return %s", e.Path)
		}
		return b, nil
	})
}

// parseLsTree reads `git ls-tree -z -l` output into directory entries and
// their object ids by path.
func parseLsTree(out []byte) ([]contentEntry, map[string]string) {
	var entries []contentEntry
	oids := map[string]string{}
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, p, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta) // mode type oid size
		if len(f) != 4 || p == "" {
			continue
		}
		e := contentEntry{Name: path.Base(p), Path: p}
		switch {
		case f[0] == "120000":
			e.Type = "symlink"
		case f[1] == "blob":
			// A blob's size is a number; anything else is no listing
			// git makes, and the record is skipped (B137).
			size, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil || size < 0 {
				continue
			}
			e.Type, e.Size = "file", size
		default:
			e.Type = "dir"
		}
		oids[p] = f[2]
		entries = append(entries, e)
	}
	return entries, oids
}

// catBlobs reads blobs whose sizes add up to total with one
// `git cat-file --batch`.
func (g gitRepo) catBlobs(ctx context.Context, oids []string, total int64) (map[string][]byte, error) {
	blobs := map[string][]byte{}
	if len(oids) == 0 {
		return blobs, nil
	}
	in := strings.Join(oids, "\n") + "\n"
	out, err := g.runStdin(ctx, strings.NewReader(in), total+int64(len(oids))*128, "cat-file", "--batch")
	if err != nil {
		return nil, err
	}
	return parseCatFileBatch(out)
}

// parseCatFileBatch reads `git cat-file --batch` output: per object a
// header "oid type size", size bytes and a newline. Anything else — a
// missing object, a size that is not one or runs past the output, a
// record not ended by its newline — is an error (B137).
func parseCatFileBatch(out []byte) (map[string][]byte, error) {
	blobs := map[string][]byte{}
	for len(out) > 0 {
		hdr, rest, ok := bytes.Cut(out, []byte("\n"))
		f := strings.Fields(string(hdr)) // oid type size, or oid missing
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("git cat-file: unexpected %q", firstLine(string(hdr)))
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || n >= len(rest) || rest[n] != '\n' {
			return nil, fmt.Errorf("git cat-file: bad size in %q", firstLine(string(hdr)))
		}
		blobs[f[0]] = rest[:n:n]
		out = rest[n+1:]
	}
	return blobs, nil
}

// diffNames lists the files that differ between the merge base of base and
// head, and head. ok is false when base is not in the repository or the
// list is over MaxChangedFiles.
func (g gitRepo) diffNames(ctx context.Context, base, head string) ([]string, bool, error) {
	b, ok, err := g.commit(ctx, base)
	if err != nil || !ok {
		return nil, false, err
	}
	h, ok, err := g.commit(ctx, head)
	if err != nil || !ok {
		return nil, false, err
	}
	return g.diff(ctx, b+"..."+h)
}

// diffTrees lists the files that differ between the trees of a and b.
func (g gitRepo) diffTrees(ctx context.Context, a, b string) ([]string, bool, error) {
	return g.diff(ctx, a, b)
}

func (g gitRepo) diff(ctx context.Context, revs ...string) ([]string, bool, error) {
	args := append([]string{"diff", "--no-ext-diff", "--no-renames", "--name-only", "-z"}, revs...)
	out, err := g.run(ctx, gitMaxListing, append(args, "--")...)
	if errors.Is(err, errGitOutputTooLarge) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list changed files: %w", err)
	}
	files := parseNameList(out)
	if len(files) > MaxChangedFiles {
		return nil, false, nil
	}
	return files, true, nil
}

type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(int64(len(p)), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// parseNameList reads NUL-separated file names (`git diff --name-only
// -z`), dropping empty ones.
func parseNameList(out []byte) []string {
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// pickLsRemote picks from `git ls-remote` output ("sha<TAB>ref" lines,
// from a repository kiln does not control) the commit id of the best
// ranked ref in rank (higher wins), or "" when none is listed with a valid
// commit id.
func pickLsRemote(out []byte, rank map[string]int) string {
	best, bestRank := "", 0
	for _, line := range strings.Split(string(out), "\n") {
		sha, name, ok := strings.Cut(line, "\t")
		if r := rank[name]; ok && r > bestRank && checkSHA(sha) == nil {
			best, bestRank = sha, r
		}
	}
	return best
}
