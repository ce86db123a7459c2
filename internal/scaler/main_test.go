package scaler

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) {
	code := storetest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			code = 1
			os.Stderr.WriteString("scaler: goroutines left after the tests: " + err.Error() + "\n")
		}
	}
	os.Exit(code)
}
