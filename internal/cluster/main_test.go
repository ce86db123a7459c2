package cluster_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(storetest.M(m))
}
