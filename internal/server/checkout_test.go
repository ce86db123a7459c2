package server

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The server's clone credentials are asked per job with where its code
// lives: a job of a configured source gets the source's clone URL and
// read-only credentials for the job's repository — its clone token, never
// its own token, which leaves a source without one cloning anonymously
// with a hint naming the flag —, a job of no source is cloned as its event
// named it, and a source that is gone fails the dispatch.
// Proves B100 (docs/behaviours.md).
func TestSourceCredentials(t *testing.T) {
	ctx := context.Background()
	db := storetest.New(t)
	st, err := ingress.Encode(&forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: "https://ghe.example.test/api/v3", Token: "pat-123", WebhookSecret: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	created, err := db.Sources().Create(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	creds := sourceCredentials{ingress.NewSources(db, forge.Options{})}
	src := jobspec.Checkout{Source: created.ID, Repository: "acme/app", URL: "https://event.example.test/acme/app.git", Ref: "refs/heads/main", SHA: "abc"}

	got, err := creds.Checkout(ctx, src)
	if err != nil || got.Auth != nil || got.URL != "https://ghe.example.test/acme/app.git" || !strings.Contains(got.Hint, "kiln sources update gh --clone-token-env") {
		t.Fatalf("a source without a clone credential: %+v (%v)", got, err)
	}
	if strings.Contains(fmt.Sprint(got), "pat-123") {
		t.Fatal("the source's own token reached the agent's checkout")
	}

	withClone := &forge.Source{Name: "gh2", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: "https://ghe.example.test/api/v3", Token: "pat-123", WebhookSecret: "s", Clone: &forge.CloneConfig{Token: "read-456"}}}
	st, err = ingress.Encode(withClone)
	if err != nil {
		t.Fatal(err)
	}
	created2, err := db.Sources().Create(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	fork := src
	fork.Source, fork.Fork = created2.ID, true
	got, err = creds.Checkout(ctx, fork)
	want := &proto.Checkout{URL: "https://ghe.example.test/acme/app.git", Ref: "refs/heads/main", SHA: "abc",
		Auth: &proto.GitAuth{Username: "x-access-token", Password: "read-456"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("source checkout %+v (%v), want %+v", got, err, want)
	}

	src.Source = ""
	got, err = creds.Checkout(ctx, src)
	if err != nil || !reflect.DeepEqual(got, &proto.Checkout{URL: src.URL, Ref: src.Ref, SHA: src.SHA}) {
		t.Fatalf("checkout without a source %+v (%v)", got, err)
	}

	src.Source = "gone"
	if _, err := creds.Checkout(ctx, src); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("checkout from a source that is gone: %v", err)
	}
}
