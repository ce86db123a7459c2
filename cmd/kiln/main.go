// Command kiln is the one binary of kiln: the server, the agent, the local
// runner, the linter and the operator commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kilnci/kiln/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
