package metrics_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// TestMain lets this test binary serve as the agent's step supervisor (the
// agent re-executes it for each step), and stops the private PostgreSQL
// server the integration tests may have started.
func TestMain(m *testing.M) {
	executor.MaybeRunShim()
	goleak.VerifyTestMain(storetest.M(m))
}
