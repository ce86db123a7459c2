package api_test

import (
	"context"
	"os"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

var ctx = context.Background()

// forEach runs fn against the API over each backend.
func forEach(t *testing.T, fn func(t *testing.T, h *apitest.Harness), opts ...apitest.Option) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		fn(t, apitest.New(t, db, opts...))
	})
}

// wantCode asserts err is a *kiln.Error with code.
func wantCode(t *testing.T, err error, code kiln.Code) {
	t.Helper()
	if kiln.ErrorCode(err) != code {
		t.Fatalf("err = %v (code %q), want code %q", err, kiln.ErrorCode(err), code)
	}
}
