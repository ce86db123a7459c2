package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

// Environment variables the operator commands read.
const (
	EnvServer    = "KILN_SERVER"
	EnvToken     = "KILN_TOKEN"
	EnvTokenFile = "KILN_TOKEN_FILE"
)

// clientFlags are the flags every operator command takes: where the server
// is and how to authenticate.
type clientFlags struct {
	server string
	token  string
}

const clientHelp = `
The server is --server, else $KILN_SERVER, else ` + api.DefaultServer + `. The admin token is
--token, else $KILN_TOKEN, else the first line of the file named by $KILN_TOKEN_FILE.`

// addClientFlags adds --server and --token to cmd and its subcommands.
func addClientFlags(cmd *cobra.Command, f *clientFlags) {
	fs := cmd.PersistentFlags()
	fs.StringVar(&f.server, "server", "", "the kiln server's URL (default $"+EnvServer+" or "+api.DefaultServer+")")
	fs.StringVar(&f.token, "token", "", "an admin token (default $"+EnvToken+")")
	cmd.Long = strings.TrimSpace(cmd.Long + "\n" + clientHelp)
}

// serverURL resolves the server address.
func (f *clientFlags) serverURL(e *env) string {
	return cmp(f.server, e.getenv(EnvServer), api.DefaultServer)
}

// tokenPath is the token file in use, absolute ("" if the token is not
// read from a file).
func (f *clientFlags) tokenPath(e *env) string {
	if cmp(f.token, e.getenv(EnvToken)) != "" {
		return ""
	}
	p := e.getenv(EnvTokenFile)
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// client builds the API client, or a usage error saying what is missing.
func (f *clientFlags) client(e *env) (*api.Client, error) {
	token := cmp(f.token, e.getenv(EnvToken))
	if token == "" {
		if p := f.tokenPath(e); p != "" {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, usageErrorf("cannot read the token file: %v", err)
			}
			token, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
			token = strings.TrimSpace(token)
			if token == "" {
				return nil, usageErrorf("the token file %s is empty", p)
			}
		}
	}
	if token == "" {
		return nil, usageErrorf("no admin token: pass --token, or set %s or %s", EnvToken, EnvTokenFile)
	}
	c, err := api.NewClient(f.serverURL(e), token)
	if err != nil {
		return nil, usageErrorf("%s", kiln.ErrorMessage(err))
	}
	return c, nil
}

func cmp(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// apiError turns an error from the client into the CLI's exit 1 with the
// server's sentence.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return &exitError{code: ExitFailure, err: errors.New("interrupted")}
	}
	var ke *kiln.Error
	if errors.As(err, &ke) {
		return &exitError{code: ExitFailure, err: errors.New(ke.Message)}
	}
	return &exitError{code: ExitFailure, err: err}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable writes aligned columns; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

// ago says how long ago t was, the way a person would: "just now", "3m ago".
func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := time.Since(*t)
	if d < 0 {
		return "in " + short(-d)
	}
	if d < 5*time.Second {
		return "just now"
	}
	return short(d) + " ago"
}

// short renders a duration with its two largest units: 850ms, 12s, 3m4s, 2h5m, 3d4h.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// took is how long something between start and end lasted ("-" if it has
// not started; up to now while it runs).
func took(start, end *time.Time) string {
	if start == nil {
		return "-"
	}
	if end == nil {
		return short(time.Since(*start))
	}
	return short(end.Sub(*start))
}

// or is s, or "-" when empty.
func or(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortSHA is the first 8 characters of a commit id.
func shortSHA(sha string) string { return sha[:min(len(sha), 8)] }

// shortRef drops refs/heads/ and refs/tags/.
func shortRef(ref string) string {
	for _, p := range []string{"refs/heads/", "refs/tags/"} {
		if s, ok := strings.CutPrefix(ref, p); ok {
			return s
		}
	}
	return ref
}

// labels renders a label set ("-" when empty).
func labels(l []string) string { return or(strings.Join(l, ",")) }

// waitRuns waits for runs to finish, printing a line on stderr whenever
// one's progress changes, and reports whether all succeeded.
func waitRuns(ctx context.Context, e *env, c *api.Client, runs []api.RunRef) (bool, error) {
	ok := true
	for _, ref := range runs {
		last := ""
		run, err := c.WaitRun(ctx, ref.ID, func(r api.Run) {
			if line := progress(r); line != last {
				fmt.Fprintln(e.stderr, line)
				last = line
			}
		})
		if err != nil {
			return false, apiError(err)
		}
		if run.Status != kiln.RunSuccess {
			ok = false
		}
	}
	return ok, nil
}

// progress is one line about a run: its status and how many jobs finished.
func progress(r api.Run) string {
	done, waiting := 0, ""
	for _, j := range r.Jobs {
		if j.Status.Terminal() {
			done++
		} else if waiting == "" && j.Status == kiln.JobQueued && j.PendingReason != "" {
			waiting = fmt.Sprintf("; %s waits: %s", j.Name, j.PendingReason)
		}
	}
	if r.Status.Terminal() {
		return fmt.Sprintf("run #%d %s after %s", r.Number, r.Status, took(r.StartedAt, r.FinishedAt))
	}
	return fmt.Sprintf("run #%d %s: %d/%d jobs finished%s", r.Number, r.Status, done, len(r.Jobs), waiting)
}

// runNumbers renders the runs a delivery started: "#3, #4".
func runNumbers(runs []api.RunRef) string {
	var parts []string
	for _, r := range runs {
		parts = append(parts, fmt.Sprintf("#%d", r.Number))
	}
	return strings.Join(parts, ", ")
}
