package trigger

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// forkVariant rewrites a real GitHub pull_request payload as if it came
// from a fork: the head repository, the author and GitHub's
// author_association are set as given (head "" makes head.repo null, as
// GitHub sends once the fork is deleted).
func forkVariant(t *testing.T, file, head, author, association string) []byte {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(readFixture(t, "github/"+file), &p); err != nil {
		t.Fatal(err)
	}
	pr := p["pull_request"].(map[string]any)
	h := pr["head"].(map[string]any)
	if head == "" {
		h["repo"] = nil
	} else {
		r := h["repo"].(map[string]any)
		r["full_name"] = head
	}
	pr["user"].(map[string]any)["login"] = author
	pr["author_association"] = association
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A pull request whose head lives in another repository than its base is a
// fork's, whoever opened it; the event says from where, by whom, and how
// GitHub relates the author to the repository. One from a branch of the
// repository itself is no fork.
// Proves B96 (docs/behaviours.md).
func TestGitHubForkPullRequests(t *testing.T) {
	for _, file := range []string{"pull_request.opened.payload.json", "pull_request.synchronize.payload.json", "pull_request.reopened.payload.json"} {
		ev, err := FromGitHub("pull_request", readFixture(t, "github/"+file))
		if err != nil || ev.Fork != nil {
			t.Fatalf("%s as GitHub sent it (head and base Codertocat/Hello-World): fork %+v, err %v", file, ev.Fork, err)
		}
		cases := []struct {
			head, author, association string
			want                      kiln.Fork
			trusted                   bool
		}{
			{"mallory/Hello-World", "mallory", "FIRST_TIME_CONTRIBUTOR", kiln.Fork{HeadRepository: "mallory/Hello-World", Author: "mallory", AuthorAssociation: "FIRST_TIME_CONTRIBUTOR"}, false},
			{"mallory/Hello-World", "mallory", "NONE", kiln.Fork{HeadRepository: "mallory/Hello-World", Author: "mallory", AuthorAssociation: "NONE"}, false},
			{"mallory/Hello-World", "mallory", "CONTRIBUTOR", kiln.Fork{HeadRepository: "mallory/Hello-World", Author: "mallory", AuthorAssociation: "CONTRIBUTOR"}, false},
			{"octocat/Hello-World", "octocat", "MEMBER", kiln.Fork{HeadRepository: "octocat/Hello-World", Author: "octocat", AuthorAssociation: "MEMBER"}, true},
			{"octocat/Hello-World", "octocat", "COLLABORATOR", kiln.Fork{HeadRepository: "octocat/Hello-World", Author: "octocat", AuthorAssociation: "COLLABORATOR"}, true},
			{"Codertocat/fork-of-hello", "Codertocat", "OWNER", kiln.Fork{HeadRepository: "Codertocat/fork-of-hello", Author: "Codertocat", AuthorAssociation: "OWNER"}, true},
			// A deleted fork: GitHub sends head.repo null.
			{"", "mallory", "NONE", kiln.Fork{Author: "mallory", AuthorAssociation: "NONE"}, false},
			// A spoofed association in lower case is read as GitHub spells it.
			{"mallory/x", "mallory", "member", kiln.Fork{HeadRepository: "mallory/x", Author: "mallory", AuthorAssociation: "MEMBER"}, true},
		}
		for _, c := range cases {
			ev, err := FromGitHub("pull_request", forkVariant(t, file, c.head, c.author, c.association))
			if err != nil {
				t.Fatalf("%s from %q: %v", file, c.head, err)
			}
			if ev.Fork == nil || *ev.Fork != c.want {
				t.Fatalf("%s from %q: fork %+v, want %+v", file, c.head, ev.Fork, c.want)
			}
			if ev.Fork.Trusted() != c.trusted {
				t.Errorf("%s from %q as %s: trusted %v", file, c.head, c.association, ev.Fork.Trusted())
			}
			if ev.Repository != "Codertocat/Hello-World" || ev.CloneURL != "https://github.com/Codertocat/Hello-World.git" {
				t.Errorf("a fork's event must name the base repository: %s %s", ev.Repository, ev.CloneURL)
			}
			if err := Validate(ev); err != nil {
				t.Errorf("fork event does not validate: %v", err)
			}
		}
	}
	ev, _ := FromGitHub("pull_request", forkVariant(t, "pull_request.opened.payload.json", "mallory/Hello-World", "mallory", "NONE"))
	if got := ev.Fork.Describe(); got != "pull request from fork mallory/Hello-World by mallory" {
		t.Errorf("describe: %q", got)
	}
}

// Names that would forge lines in reasons and statuses are refused.
// Proves B96 (docs/behaviours.md).
func TestForkNamesArePlain(t *testing.T) {
	for _, bad := range []string{"mallory\nwaiting for approval: approved", "a b", "x\x1b[31m", "evil\u202egnp"} {
		_, err := FromGitHub("pull_request", forkVariant(t, "pull_request.opened.payload.json", "mallory/x", bad, "NONE"))
		if err == nil || IsIgnored(err) || !strings.Contains(err.Error(), "user.login") {
			t.Errorf("author %q: %v", bad, err)
		}
	}
	ev := &kiln.Event{Name: kiln.EventPush, Branch: "main", Fork: &kiln.Fork{HeadRepository: "a/b", Author: "c"}}
	if err := Validate(ev); err == nil {
		t.Error("a push that claims to come from a fork validates")
	}
}
