package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/store"
)

// `sources add` takes a fork policy, fork labels and a read-only clone
// credential, and warns when the only token can push; `sources update`
// changes exactly what its flags name and keeps every other secret.
// Proves B100 (docs/behaviours.md).
func TestSourcesForkPolicyAndCloneCredentials(t *testing.T) {
	o := newOp(t)
	gh := forgetest.NewGitHub(t)
	gh.SetScopes("repo")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("hook", "s3cret-hook\n")
	o.vars["GH_TOKEN"], o.vars["READ_TOKEN"] = "ghp_s3cret", "github_pat_read"

	out, errOut := o.ok2(t, "sources", "add", "gh", "--kind", "github", "--api-base", gh.URL, "--token-env", "GH_TOKEN",
		"--secret-file", secret, "--fork-pull-requests", "deny", "--fork-labels", "gpu,Deploy")
	contains(t, out, "added github source gh")
	contains(t, errOut, "warning: the token can push (a classic token with scope repo)", "--clone-token-env")
	stored := func() (store.Source, *forge.Source) {
		st, err := o.DB.Sources().GetByName(t.Context(), "gh")
		if err != nil {
			t.Fatal(err)
		}
		fs, err := ingress.Decode(st)
		if err != nil {
			t.Fatal(err)
		}
		return st, fs
	}
	st, fs := stored()
	if st.ForkPullRequests != kiln.ForkDeny || st.ForkLabels.Key() != "deploy,gpu" || fs.GitHub.Clone != nil {
		t.Fatalf("added: %s %q %+v", st.ForkPullRequests, st.ForkLabels.Key(), fs.GitHub.Clone)
	}
	contains(t, o.ok(t, "sources", "show", "gh"), `"fork_pull_requests": "deny"`, `"deploy"`)

	out, errOut = o.ok2(t, "sources", "update", "gh", "--fork-pull-requests", "approve", "--clone-token-env", "READ_TOKEN")
	contains(t, out, "updated github source gh")
	contains(t, errOut, "warning: the clone token can push")
	st, fs = stored()
	if st.ForkPullRequests != kiln.ForkApprove || st.ForkLabels.Key() != "deploy,gpu" || fs.GitHub.Token != "ghp_s3cret" ||
		fs.GitHub.WebhookSecret != "s3cret-hook" || fs.GitHub.Clone == nil || fs.GitHub.Clone.Token != "github_pat_read" {
		t.Fatalf("after update: %s %q %+v", st.ForkPullRequests, st.ForkLabels.Key(), fs.GitHub)
	}

	key := write("deploy_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nKEY\n-----END OPENSSH PRIVATE KEY-----")
	hosts := write("known_hosts", "github.example ssh-ed25519 AAAA")
	o.ok(t, "sources", "update", "gh", "--clone-ssh-key-file", key, "--clone-known-hosts-file", hosts, "--fork-labels", "")
	st, fs = stored()
	if c := fs.GitHub.Clone; c == nil || c.Token != "" || !strings.HasSuffix(c.SSHKey, "-----END OPENSSH PRIVATE KEY-----\n") ||
		c.KnownHosts != "github.example ssh-ed25519 AAAA\n" || len(st.ForkLabels) != 0 {
		t.Fatalf("ssh clone credential: %+v, fork labels %q", fs.GitHub.Clone, st.ForkLabels.Key())
	}
	o.ok(t, "sources", "update", "gh", "--remove-clone-credential")
	if _, fs = stored(); fs.GitHub.Clone != nil {
		t.Fatalf("clone credential kept: %+v", fs.GitHub.Clone)
	}

	o.fails(t, ExitUsage, "nothing to change", "sources", "update", "gh")
	o.fails(t, ExitUsage, "kind cannot change", "sources", "update", "gh", "--kind", "gitea")
	o.fails(t, ExitUsage, "--path is not a setting of github sources", "sources", "update", "gh", "--path", "/x")
	o.fails(t, ExitUsage, "--fork-labels is not a setting of local sources", "sources", "update", "app", "--fork-labels", "gpu")
	o.fails(t, ExitFailure, "not approve, run or deny", "sources", "update", "gh", "--fork-pull-requests", "sometimes")
	o.fails(t, ExitFailure, `no source named "ghost"`, "sources", "update", "ghost", "--fork-pull-requests", "run")
	o.fails(t, ExitUsage, "--remove-clone-credential goes with no other", "sources", "update", "gh", "--remove-clone-credential", "--clone-token-env", "READ_TOKEN")
}

// `runs show` says a fork's run waits for approval and how to approve or
// reject it; `runs approve` releases it and `runs show` then names the
// approver.
// Proves B97 (docs/behaviours.md).
func TestRunsApprove(t *testing.T) {
	o := newOp(t)
	ev, _ := json.Marshal(kiln.Event{Name: kiln.EventPullRequest, Fork: &kiln.Fork{HeadRepository: "mallory/app", Author: "mallory", AuthorAssociation: "NONE"}})
	cr, err := o.DB.Runs().Create(t.Context(), store.NewRun{Workflow: "ci", Event: ev,
		Hold: "waiting for approval: pull request from fork mallory/app by mallory",
		Jobs: []store.NewJob{{Name: "build", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux"), Fork: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	n := strconv.FormatInt(cr.Number, 10)
	contains(t, o.ok(t, "runs", "show", n), "pull request from fork mallory/app by mallory (NONE)",
		"waiting for approval: pull request from fork mallory/app by mallory", "kiln runs approve "+n, "kiln runs cancel "+n)
	contains(t, o.ok(t, "runs", "approve", n), "run #"+n+" approved by tests")
	contains(t, o.ok(t, "runs", "show", n), "approved by tests")
	o.fails(t, ExitFailure, "approved already", "runs", "approve", n)
}
