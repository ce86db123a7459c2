package store_test

import (
	"testing"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// An upgrade moves every job's spec out of its row (migration 0022) and
// loses none: a database an older kiln left with a queued job and a
// pending one gives each its spec back, to the job's reader and to the
// claim that sends the queued one.
func TestUpgradeKeepsEveryJobsSpec(t *testing.T) {
	for name, urlFor := range emptyDatabases {
		t.Run(name, func(t *testing.T) {
			cfg := store.Config{URL: urlFor(t), Releaser: storetest.QueueAsCreated}
			old, err := store.OpenAtVersion(ctx, cfg, 21)
			if err != nil {
				t.Fatal(err)
			}
			key := linuxReq().Key()
			for _, q := range []string{
				`INSERT INTO runs (id, number, workflow, status, created_at, updated_at) VALUES ('r1', 1, 'ci', 'pending', 1, 1)`,
				`INSERT INTO jobs (id, run_id, idx, name, base, status, spec, queue_key, queued_at, created_at, updated_at)
					VALUES ('j1', 'r1', 0, 'build', 'build', 'queued', '{"agent":{"name":"build"}}', '` + key + `', 1, 1, 1)`,
				`INSERT INTO jobs (id, run_id, idx, name, base, status, spec, queue_key, created_at, updated_at)
					VALUES ('j2', 'r1', 1, 'test', 'test', 'pending', '{"agent":{"name":"test"}}', '` + key + `', 1, 1)`,
			} {
				if _, err := old.SQL().Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := store.Open(ctx, cfg)
			if err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			defer db.Close()
			run, err := db.Runs().Get(ctx, "r1")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"build": `{"agent":{"name":"build"}}`, "test": `{"agent":{"name":"test"}}`}
			for _, j := range run.Jobs {
				if string(j.Spec) != want[j.Name] {
					t.Errorf("job %s after the upgrade: spec %s, want %s", j.Name, j.Spec, want[j.Name])
				}
			}
			cs, err := db.Queue().Claim(ctx, "agent-1", linux, 5)
			if err != nil || len(cs) != 1 || cs[0].JobID != "j1" || string(cs[0].Spec) != want["build"] {
				t.Fatalf("claim after the upgrade: %+v, %v; want j1 with its spec", cs, err)
			}
		})
	}
}
