package scaler

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv("KILN_FAKE_FIRECRACKER") == "1" {
		os.Exit(fakeFirecracker()) // this binary runs as the fake VMM
	}
	code := storetest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			code = 1
			os.Stderr.WriteString("scaler: goroutines left after the tests: " + err.Error() + "\n")
		}
	}
	os.Exit(code)
}
