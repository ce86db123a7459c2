package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/kilnci/kiln/internal/cli.Version=…"
// (scripts/release does); otherwise it comes from the build info.
var Version = ""

// Revision is the git commit, set by scripts/release with -X when the go
// command cannot stamp it (it finds no .git directory in a git worktree,
// whose .git is a file).
var Revision = ""

// buildVersion is what this binary says it is: the -X version if set, else
// the module version the go command stamped (a tag, or a pseudo-version
// from the commit), else "(devel)".
func buildVersion() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// buildDetails is the VCS revision and state and the Go version, from the
// build info.
func buildDetails() (revision, when string, modified bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Revision, "", false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision == "" {
		revision = Revision
	}
	return revision, when, modified
}

func printVersion(w io.Writer) {
	fmt.Fprintln(w, "kiln", buildVersion())
	rev, when, modified := buildDetails()
	var parts []string
	if rev != "" {
		r := "revision " + rev
		if modified {
			r += " (with uncommitted changes)"
		}
		parts = append(parts, r)
	}
	if when != "" {
		parts = append(parts, "committed "+when)
	}
	parts = append(parts, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	fmt.Fprintln(w, "  "+strings.Join(parts, "\n  "))
}

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kiln's version, the commit it was built from, and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			printVersion(e.stdout)
			return nil
		},
	}
}
