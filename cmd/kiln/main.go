// Command kiln is the one binary of kiln: the server, the agent, the local
// runner, the linter and the operator commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kilnci/kiln/internal/cli"
	"github.com/kilnci/kiln/internal/executor"
)

func main() {
	// When started as a step's supervisor this runs the step and exits;
	// it must come before anything else (signal handling included).
	executor.MaybeRunShim()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
