package store_test

import (
	"os"
	"testing"

	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	os.Exit(storetest.Main(m))
}
