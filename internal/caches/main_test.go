package caches_test

import (
	"testing"

	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }
