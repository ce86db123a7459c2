package server

import (
	"context"
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
// credentials for the job's repository, a job of no source is cloned as
// its event named it, and a source that is gone fails the dispatch.
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
	want := &proto.Checkout{URL: "https://ghe.example.test/acme/app.git", Ref: "refs/heads/main", SHA: "abc",
		Auth: &proto.GitAuth{Username: "x-access-token", Password: "pat-123"}}
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
