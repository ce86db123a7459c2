package metrics_test

import (
	"os"
	"testing"

	"github.com/kilnci/kiln/internal/store/storetest"
)

// TestMain stops the private PostgreSQL server the integration tests may
// have started.
func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }
