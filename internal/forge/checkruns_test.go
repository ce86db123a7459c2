package forge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// appFake is the fake GitHub as an App installation with perms, and a
// GitHub App source on it with checks on.
func appFake(t *testing.T, perms map[string]string) (*forgetest.GitHub, *Source) {
	t.Helper()
	key := rsaTestKey(t)
	gh := forgetest.NewGitHub(t)
	gh.SetApp(forgetest.App{ID: "12345", InstallationID: 987, Key: &key.PublicKey, Permissions: perms})
	return gh, &Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{
		APIBase: gh.URL, WebhookSecret: "s", Checks: true,
		App: &GitHubApp{AppID: "12345", InstallationID: 987, PrivateKeyPEM: pkcs1PEM(key)}}}
}

var allPerms = map[string]string{"contents": "read", "statuses": "write", "checks": "write"}

func checkUpdate(state State, c *CheckRun) Status {
	return Status{State: state, Context: "kiln/ci (push)", Description: "run #7", TargetURL: "https://kiln.example/runs/7", Check: c}
}

// A GitHub App source with checks on posts one check run per run: created
// queued, updated in progress and completed with its conclusion, details
// URL, output and annotations — 120 of them in a request of 50 and two
// further updates, as GitHub takes them — and no commit status. A
// restarted server (no memory of the id) finds the check run by its
// external id and updates it; a rerun (another run id) gets its own. The
// token agents clone with can read the code and cannot write checks.
// Proves B277 (docs/behaviours.md).
func TestGitHubAppPostsCheckRuns(t *testing.T) {
	gh, src := appFake(t, allPerms)
	repo, err := NewRepo(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []*CheckRun{
		{ExternalID: "run-1", Status: CheckQueued},
		{ExternalID: "run-1", Status: CheckInProgress, StartedAt: started},
	} {
		if err := repo.PostStatus(ctx, fakeRepo, shaA, checkUpdate(StatePending, c)); err != nil {
			t.Fatal(err)
		}
	}
	var anns []Annotation
	for i := range 120 {
		anns = append(anns, Annotation{Path: ".kiln/workflows/ci.yml", StartLine: i + 1, Title: fmt.Sprint("a", i), Message: "line\nmore"})
	}
	done := &CheckRun{ExternalID: "run-1", Status: CheckCompleted, Conclusion: ConclusionFailure, StartedAt: started,
		CompletedAt: started.Add(time.Minute), Title: "1 of 2 jobs failed", Summary: "- ❌ **test** failed", Annotations: anns}
	if err := repo.PostStatus(ctx, fakeRepo, shaA, checkUpdate(StateFailure, done)); err != nil {
		t.Fatal(err)
	}
	runs := gh.CheckRuns()
	if len(runs) != 1 {
		t.Fatalf("%d check runs, want 1: %+v", len(runs), runs)
	}
	c := runs[0]
	if c.Name != "kiln/ci (push)" || c.HeadSHA != shaA || c.ExternalID != "run-1" || c.DetailsURL != "https://kiln.example/runs/7" ||
		c.Status != "completed" || c.Conclusion != "failure" || c.StartedAt != "2026-03-01T12:00:00Z" || c.CompletedAt != "2026-03-01T12:01:00Z" ||
		c.Output.Title != "1 of 2 jobs failed" || c.Output.Summary != "- ❌ **test** failed" {
		t.Errorf("check run %+v", c)
	}
	// POST queued, PATCH in_progress, PATCH completed (50), PATCH 50, PATCH 20.
	if want := []string{"queued", "in_progress", "completed", "", ""}; !slices.Equal(c.Requests, want) {
		t.Errorf("requests %q, want %q", c.Requests, want)
	}
	if len(c.Annotations) != 120 || c.Annotations[0].Title != "a0" || c.Annotations[119].Title != "a119" ||
		c.Annotations[50].Level != "failure" || c.Annotations[7].EndLine != 8 {
		t.Errorf("%d annotations, first %+v", len(c.Annotations), c.Annotations[0])
	}
	if n := len(gh.Statuses()); n != 0 {
		t.Errorf("%d commit statuses posted besides the check run", n)
	}

	// A new process: the check run is found by its external id.
	again, err := NewRepo(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rerun := *done
	rerun.Conclusion, rerun.Annotations = ConclusionSuccess, nil
	if err := again.PostStatus(ctx, fakeRepo, shaA, checkUpdate(StateSuccess, &rerun)); err != nil {
		t.Fatal(err)
	}
	if runs := gh.CheckRuns(); len(runs) != 1 || runs[0].Conclusion != "success" {
		t.Fatalf("after a restart: %+v", runs)
	}
	if err := again.PostStatus(ctx, fakeRepo, shaA, checkUpdate(StatePending, &CheckRun{ExternalID: "run-2", Status: CheckQueued})); err != nil {
		t.Fatal(err)
	}
	if runs := gh.CheckRuns(); len(runs) != 2 || runs[1].ExternalID != "run-2" || runs[1].Status != "queued" {
		t.Fatalf("a rerun's check run: %+v", runs)
	}

	// Clone tokens stay read-only: minted with contents: read, refused by
	// the checks API.
	ci, err := repo.Clone(ctx, fakeRepo)
	if err != nil {
		t.Fatal(err)
	}
	if perms := gh.Minted()[ci.Password]; len(perms) != 1 || perms["contents"] != "read" {
		t.Fatalf("the clone token has %v", perms)
	}
	req, _ := http.NewRequest(http.MethodPost, gh.URL+"/repos/acme/app/check-runs", bytes.NewReader([]byte(`{"name":"x","head_sha":"`+shaA+`"}`)))
	req.Header.Set("Authorization", "Bearer "+ci.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a check run written with the clone token: %d, want 403", resp.StatusCode)
	}
}

// A check run GitHub refuses for good — 403 because the installation lacks
// checks: write, or 422 — is posted as a commit status instead; the
// reporter counts it posted and hands the reason (naming the permission
// for a 403) to its Fallback hook. A rate-limited 403 is retried instead.
// Proves B278 (docs/behaviours.md).
func TestRefusedCheckRunFallsBackToACommitStatus(t *testing.T) {
	gh, src := appFake(t, map[string]string{"contents": "read", "statuses": "write"})
	repo, err := NewRepo(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reasons []string
	rep := NewStatusReporter(func(context.Context, string) (StatusPoster, error) { return repo, nil }, ReporterConfig{
		RetryBase: time.Millisecond,
		Fallback: func(source string, st Status, reason string) {
			mu.Lock()
			defer mu.Unlock()
			reasons = append(reasons, source+" "+st.Check.ExternalID+": "+reason)
		},
	})
	go func() { _ = rep.Run(t.Context()) }()
	rep.Report("gh", fakeRepo, shaA, checkUpdate(StatePending, &CheckRun{ExternalID: "run-1", Status: CheckQueued}))
	// The reporter counts the post after the fake server has it: wait for
	// the count too.
	waittest.UntilState(t, 10*time.Second, "a fallback status", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		s := rep.Stats()
		return len(reasons) == 1 && len(gh.Statuses()) == 1 && s.Posted == 1, fmt.Sprint(reasons, gh.Statuses(), s)
	})
	if st := gh.Statuses()[0]; st.State != "pending" || st.Context != "kiln/ci (push)" || st.TargetURL != "https://kiln.example/runs/7" {
		t.Errorf("fallback status %+v", st)
	}
	if r := reasons[0]; !strings.HasPrefix(r, "gh run-1: ") || !strings.Contains(r, "Resource not accessible by integration") ||
		!strings.Contains(r, "checks: write") {
		t.Errorf("reason %q", r)
	}
	if s := rep.Stats(); s.Posted != 1 || s.ChecksRefused != 1 || s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}

	// 422 from a checks-enabled installation: the same fallback, with
	// GitHub's own words.
	gh2, src2 := appFake(t, allPerms)
	repo2, err := NewRepo(src2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gh2.FailChecks(http.StatusUnprocessableEntity, "Validation Failed")
	err = repo2.PostStatus(t.Context(), fakeRepo, shaA, checkUpdate(StateFailure, &CheckRun{ExternalID: "run-2", Status: CheckCompleted, Conclusion: ConclusionFailure}))
	var refused *ChecksRefused
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "Validation Failed") || len(gh2.Statuses()) != 1 || gh2.Statuses()[0].State != "failure" {
		t.Fatalf("422: %v, statuses %v", err, gh2.Statuses())
	}
	// A 403 that is a rate limit is not a refusal: nothing posted, retried.
	gh2.FailChecks(0, "")
	if checksRefused(&APIError{Status: 403, RetryAfter: time.Minute, Err: &kiln.Error{Code: kiln.CodeUnavailable}}) {
		t.Error("a rate-limited 403 counted as a refusal")
	}
}

// Only a GitHub App may post check runs: a token source with checks on is
// refused, saying why. Proves B277 (docs/behaviours.md).
func TestChecksNeedAGitHubApp(t *testing.T) {
	src := &Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{Token: "ghp_x", WebhookSecret: "s", Checks: true}}
	err := src.Validate()
	wantCode(t, err, kiln.CodeInvalid)
	if !strings.Contains(err.Error(), "needs a GitHub App source") || !strings.Contains(err.Error(), "commit statuses") {
		t.Errorf("token source with checks: %v", err)
	}
	key := rsaTestKey(t)
	src.GitHub = &GitHubConfig{WebhookSecret: "s", Checks: true, App: &GitHubApp{AppID: "1", InstallationID: 2, PrivateKeyPEM: pkcs1PEM(key)}}
	if err := src.Validate(); err != nil {
		t.Errorf("App source with checks: %v", err)
	}
}
