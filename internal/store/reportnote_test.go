package store_test

import (
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// A run keeps why its report to the forge fell back (a refused check run
// posted as a commit status), read with the run and its header; the latest
// note wins, and a run that does not exist is not found. On SQLite and
// PostgreSQL. Proves B278 (docs/behaviours.md).
func TestRunReportNote(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("build")))
		if r := mustRun(t, db, cr.ID); r.ReportNote != "" {
			t.Fatalf("a new run's note %q", r.ReportNote)
		}
		for _, note := range []string{"GitHub refused the check run kiln/ci (push)", "GitHub refused the check run kiln/ci (push)", "second"} {
			if err := db.Runs().SetReportNote(ctx, cr.ID, note); err != nil {
				t.Fatal(err)
			}
			h, err := db.Runs().Header(ctx, cr.ID)
			if err != nil || h.ReportNote != note || mustRun(t, db, cr.ID).ReportNote != note {
				t.Fatalf("note %q: header %q %v", note, h.ReportNote, err)
			}
		}
		if err := db.Runs().SetReportNote(ctx, "nope", "x"); kiln.ErrorCode(err) != kiln.CodeNotFound {
			t.Fatalf("a missing run: %v", err)
		}
	})
}
