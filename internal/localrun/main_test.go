package localrun

import (
	"os"
	"testing"

	"github.com/kilnci/kiln/internal/executor"
)

func TestMain(m *testing.M) {
	// kiln run's agent re-executes this binary as the step supervisor.
	executor.MaybeRunShim()
	os.Exit(m.Run())
}
