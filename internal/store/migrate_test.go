package store_test

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// emptyDatabases gives each backend's test a database no migration has
// touched.
var emptyDatabases = map[string]func(testing.TB) string{
	"sqlite":   storetest.SQLiteURL,
	"postgres": storetest.EmptyPostgresURL,
}

// Opening migrates an empty database; opening again changes nothing; many
// coordinators opening one empty database at once migrate it once.
// Proves B35 (docs/behaviours.md).
func TestMigrations(t *testing.T) {
	for name, urlFor := range emptyDatabases {
		t.Run(name, func(t *testing.T) {
			url := urlFor(t)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					db, err := store.Open(ctx, store.Config{URL: url, Releaser: storetest.QueueAsCreated})
					if err != nil {
						errs <- err
						return
					}
					errs <- db.Close()
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent open: %v", err)
				}
			}
			db, err := store.Open(ctx, store.Config{URL: url, Releaser: storetest.QueueAsCreated})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			files, err := filepath.Glob(filepath.Join("migrations", name, "*.sql"))
			if err != nil || len(files) == 0 {
				t.Fatalf("migration files: %v %v", files, err)
			}
			var n int
			if err := db.SQL().QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != len(files) {
				t.Fatalf("schema_migrations rows %d %v, want one per file (%d)", n, err, len(files))
			}
			// A database from a newer kiln is refused.
			if _, err := db.SQL().Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', 0)"); err != nil {
				t.Fatal(err)
			}
			_, err = store.Open(ctx, store.Config{URL: url, Releaser: storetest.QueueAsCreated})
			if err == nil || !strings.Contains(err.Error(), "newer than this kiln knows") {
				t.Fatalf("open a newer database: %v", err)
			}
		})
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	for _, cfg := range []store.Config{
		{},
		{URL: "sqlite://:memory:"},
		{URL: "/tmp/x.db", SQLiteSynchronous: "OFF"},
		{URL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"},
	} {
		cfg.Releaser = storetest.QueueAsCreated
		if db, err := store.Open(ctx, cfg); err == nil {
			db.Close()
			t.Errorf("Open(%+v) succeeded", cfg)
		}
	}
	// A store without a Releaser could never release a job.
	_, err := store.Open(ctx, store.Config{URL: storetest.SQLiteURL(t)})
	if err == nil || !strings.Contains(err.Error(), "Releaser is required") {
		t.Errorf("Open without a Releaser: %v", err)
	}
}

// The migrations a start applies commit together: one that fails leaves
// the database at the version it had, the ones before it in the same start
// undone too; when all succeed each has its row.
func TestMigrationsOfOneStartCommitTogether(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		err := store.ApplyMigrationSQL(ctx, db, "CREATE TABLE m_first (id INTEGER)", "CREATE TABLE m_broken (")
		if err == nil || !strings.Contains(err.Error(), "1002_test.sql") {
			t.Fatalf("a broken migration: %v, want an error naming it", err)
		}
		if _, err := db.SQL().Exec("SELECT COUNT(*) FROM m_first"); err == nil {
			t.Fatal("the migration before the broken one stayed applied")
		}
		var n int
		if err := db.SQL().QueryRow("SELECT COUNT(*) FROM schema_migrations WHERE version > 1000").Scan(&n); err != nil || n != 0 {
			t.Fatalf("schema_migrations rows of the failed start: %d %v, want none", n, err)
		}
		if err := store.ApplyMigrationSQL(ctx, db, "CREATE TABLE m_first (id INTEGER)", "CREATE TABLE m_second (id INTEGER)"); err != nil {
			t.Fatal(err)
		}
		if err := db.SQL().QueryRow("SELECT COUNT(*) FROM schema_migrations WHERE version > 1000").Scan(&n); err != nil || n != 2 {
			t.Fatalf("schema_migrations rows: %d %v, want 2", n, err)
		}
	})
}
