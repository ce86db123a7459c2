package forge

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// credentialCheckTimeout bounds the forge call CredentialWarnings makes.
const credentialCheckTimeout = 10 * time.Second

// cloneFlags names the settings that give a source a clone credential.
const cloneFlags = "--clone-token-env, --clone-token-file or --clone-ssh-key-file"

// CredentialWarnings says, in sentences for whoever adds or changes src,
// where its tokens put agents at risk or leave them without access: a
// token source whose only token can push (a classic GitHub token with the
// repo or public_repo scope, as X-OAuth-Scopes lists them) or may (a
// fine-grained GitHub token or a Gitea token, whose permissions the forge
// does not list), and a clone token that can push. kiln never sends a
// source's own token to agents, so such a source's agents clone
// anonymously. It asks GitHub at most once, briefly; nil when nothing is
// worth saying.
func CredentialWarnings(ctx context.Context, src *Source, opts Options) []string {
	switch {
	case src.GitHub != nil && src.GitHub.App == nil:
		return gitHubTokenWarnings(ctx, src, opts)
	case src.Gitea != nil && src.Gitea.Clone == nil:
		return []string{"kiln cannot tell whether the Gitea token can push (Gitea does not say what a token may do); " +
			"it never gives it to agents, so they clone anonymously: private repositories need a read-only clone credential (" + cloneFlags + ")"}
	}
	return nil
}

func gitHubTokenWarnings(ctx context.Context, src *Source, opts Options) []string {
	c := src.GitHub
	if c.Clone != nil {
		if c.Clone.Token == "" {
			return nil // a deploy key: read-only unless made otherwise on GitHub
		}
		scopes, classic, err := gitHubScopes(ctx, c, c.Clone.Token, opts)
		if err == nil && classic && writeScope(scopes) != "" {
			return []string{"the clone token can push (a classic token with scope " + writeScope(scopes) + "), and every checkout hands it to an agent: " +
				"give a fine-grained token with contents: read only, or a deploy key (--clone-ssh-key-file)"}
		}
		return nil
	}
	scopes, classic, err := gitHubScopes(ctx, c, c.Token, opts)
	switch {
	case err != nil:
		return []string{"kiln could not ask GitHub what the token may do (" + kiln.ErrorMessage(err) + "), so it cannot tell whether it can push; " +
			"it never gives it to agents, so they clone anonymously: private repositories need a read-only clone credential (" + cloneFlags + ")"}
	case !classic:
		return []string{"kiln cannot tell whether the token can push (GitHub does not list a fine-grained token's permissions); " +
			"it never gives it to agents, so they clone anonymously: private repositories need a read-only clone credential (" + cloneFlags + ")"}
	case writeScope(scopes) != "":
		return []string{"the token can push (a classic token with scope " + writeScope(scopes) + "), so kiln never gives it to agents and they clone anonymously: " +
			"private repositories need a read-only clone credential (" + cloneFlags + ")"}
	}
	return nil
}

// gitHubScopes asks GitHub who token is and returns the scopes in its
// X-OAuth-Scopes header; classic is false when the header is missing (a
// fine-grained token, which has permissions instead of scopes).
func gitHubScopes(ctx context.Context, c *GitHubConfig, token string, opts Options) (scopes []string, classic bool, err error) {
	o := opts.withDefaults()
	base, err := parseBase(cmpOr(c.APIBase, DefaultGitHubAPI), "")
	if err != nil {
		return nil, false, err
	}
	api := &apiClient{
		forge: "GitHub", base: base, hc: o.HTTPClient, maxBody: o.MaxResponseBytes, now: o.Now,
		headers: map[string]string{"Accept": gitHubMediaType, "X-GitHub-Api-Version": gitHubAPIVersion},
		auth:    func(context.Context) (string, error) { return "Bearer " + token, nil },
	}
	ctx, cancel := context.WithTimeout(ctx, credentialCheckTimeout)
	defer cancel()
	h, err := api.do(ctx, request{method: http.MethodGet, path: "/user"}, nil)
	if err != nil {
		return nil, false, err
	}
	raw, ok := h[http.CanonicalHeaderKey("X-OAuth-Scopes")]
	if !ok {
		return nil, false, nil
	}
	for _, s := range strings.Split(strings.Join(raw, ","), ",") {
		if s = strings.TrimSpace(s); s != "" {
			scopes = append(scopes, s)
		}
	}
	return scopes, true, nil
}

// writeScope returns the first classic scope that can push to
// repositories, or "".
func writeScope(scopes []string) string {
	for _, s := range scopes {
		if s == "repo" || s == "public_repo" {
			return s
		}
	}
	return ""
}
