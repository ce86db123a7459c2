package store_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	goleak.VerifyTestMain(storetest.M(m))
}
