// Package cli holds kiln's subcommands. Each is thin: it parses flags and
// calls the package that owns the work (workflow for lint, server for
// server, agent for agent, the api client for operator commands).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes shared by every subcommand.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and found a problem (lint errors, a failed run)
	ExitUsage   = 2 // bad flags or arguments, or nothing to work on
)

// exitError carries an exit code through cobra's error return.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

// usageErrorf reports a usage problem (exit 2).
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// failed reports that the command ran and found a problem it already printed (exit 1).
func failed() error { return &exitError{code: ExitFailure} }

// env bundles what commands read from the process, so tests can run them in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// Main runs the kiln command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: osGetenv})
}

func run(ctx context.Context, args []string, e *env) int {
	root := newRoot(e)
	root.SetArgs(args)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(e.stderr, "kiln:", ee.err)
		}
		return ee.code
	}
	// cobra's own errors (unknown flag, unknown command, wrong arg count) are usage errors.
	fmt.Fprintln(e.stderr, "kiln:", err)
	return ExitUsage
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "kiln",
		Short:         "kiln is a self-hosted CI/CD orchestrator",
		Long:          "kiln receives forge webhooks, matches them against the workflows in .kiln/workflows,\nstores runs durably and dispatches their jobs to agents.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.AddCommand(newVersionCmd(e))
	root.AddCommand(newLintCmd(e))
	root.AddCommand(newServerCmd(e))
	root.AddCommand(newAgentCmd(e))
	root.AddCommand(newRunCmd(e))
	root.AddCommand(newRunsCmd(e))
	root.AddCommand(newLogsCmd(e))
	root.AddCommand(newArtifactsCmd(e))
	root.AddCommand(newAgentsCmd(e))
	root.AddCommand(newTokensCmd(e))
	root.AddCommand(newAdminTokensCmd(e))
	root.AddCommand(newSourcesCmd(e))
	root.AddCommand(newDispatchCmd(e))
	root.AddCommand(newQueueCmd(e))
	root.AddCommand(newScalersCmd(e))
	root.AddCommand(newAgentImageCmd(e))
	root.AddCommand(newEventsCmd(e))
	root.AddCommand(newTriggerCmd(e))
	root.AddCommand(newBenchCmd(e))
	root.SetOut(e.stdout) // the completion scripts write where the output is when they are made
	root.SetErr(e.stderr)
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" { // an unknown shell is a usage error, not help and exit 0
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(*cobra.Command, []string) error {
				return usageErrorf("kiln completion wants a shell: bash, zsh, fish or powershell (docs/cli.md)")
			}
		}
	}
	return root
}
