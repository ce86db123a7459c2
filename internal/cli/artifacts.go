package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/tarball"
	"github.com/spf13/cobra"
)

func newArtifactsCmd(e *env) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "artifacts",
		Short: "List and download the artifacts of a run",
		Long: `artifacts works on the files the jobs of a run uploaded (their artifacts: lists). A run is
named by its number (12 or #12) or its id.`,
		Args: cobra.NoArgs,
	}
	addClientFlags(cmd, &cf)
	cmd.AddCommand(newArtifactsListCmd(e, &cf), newArtifactsGetCmd(e, &cf))
	return cmd
}

func newArtifactsListCmd(e *env, cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list RUN",
		Short:   "List a run's artifacts",
		Example: "  kiln artifacts list 12",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			list, err := c.Artifacts(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return json.NewEncoder(e.stdout).Encode(list)
			}
			if len(list) == 0 {
				fmt.Fprintf(e.stderr, "run %s has no artifacts\n", args[0])
				return nil
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "NAME\tJOB\tSIZE\tUPLOADED")
			for _, a := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", terminalSafe(a.Name, false), terminalSafe(a.Job, false), a.Size, a.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func newArtifactsGetCmd(e *env, cf *clientFlags) *cobra.Command {
	var dir string
	var raw bool
	cmd := &cobra.Command{
		Use:   "get RUN [NAME]",
		Short: "Download a run's artifacts (or one) into a directory",
		Long: `get downloads the artifact NAME of RUN (every artifact without NAME) and unpacks each into
DIR/NAME (--dir, default the current directory). With --tar it writes DIR/NAME.tar.gz as
stored instead.`,
		Example: "  kiln artifacts get 12\n  kiln artifacts get 12 coverage --dir out",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			var names []string
			if len(args) == 2 {
				names = []string{args[1]}
			} else {
				list, err := c.Artifacts(cmd.Context(), args[0])
				if err != nil {
					return apiError(err)
				}
				for _, a := range list {
					names = append(names, a.Name)
				}
				if len(names) == 0 {
					return fmt.Errorf("run %s has no artifacts", args[0])
				}
			}
			for _, name := range names {
				if err := getArtifact(cmd, e, c, args[0], name, dir, raw); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "where to put the artifacts")
	cmd.Flags().BoolVar(&raw, "tar", false, "write NAME.tar.gz instead of unpacking")
	return cmd
}

func getArtifact(cmd *cobra.Command, e *env, c *api.Client, run, name, dir string, raw bool) error {
	// The server checks names, but a path is never built from one that
	// could climb out of dir.
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return fmt.Errorf("artifact name %q cannot be a file name here", name)
	}
	body, err := c.Artifact(cmd.Context(), run, name)
	if err != nil {
		return apiError(err)
	}
	defer body.Close()
	if raw {
		out := filepath.Join(dir, name+".tar.gz")
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("artifact %q: %w", name, err)
		}
		fmt.Fprintf(e.stderr, "%s: %d bytes\n", out, n)
		return nil
	}
	target := filepath.Join(dir, name)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	files, size, err := tarball.Unpack(body, target)
	if err != nil {
		return fmt.Errorf("artifact %q: %w", name, err)
	}
	fmt.Fprintf(e.stderr, "%s: %d files, %d bytes\n", target, files, size)
	return nil
}
