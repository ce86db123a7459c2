package forge

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kilnci/kiln"
)

// hookMarker identifies a post-receive hook kiln wrote, so reinstalling
// replaces it but a hook someone else wrote is never overwritten silently.
const hookMarker = "# kiln post-receive hook"

// HookConfig describes the post-receive hook of a local source.
type HookConfig struct {
	Source string // the local source's name
	// Kiln is the kiln executable the hook runs; default "kiln", looked up
	// on the PATH of whoever pushes. An absolute path is more robust.
	Kiln string
	// Env is exported before kiln runs: how the CLI reaches the server
	// (its address, a token file). The hook file is written 0755, so put a
	// token in a file only the pushing user can read and name that file
	// here rather than the token itself.
	Env []EnvVar
}

// EnvVar is one variable the hook exports.
type EnvVar struct{ Name, Value string }

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// HookScript returns the text of a post-receive hook that runs
//
//	kiln trigger SOURCE --ref REF --sha NEW --before OLD
//
// for every branch or tag a push updated (deleted refs start nothing). A
// failed trigger prints a line to the pusher ("remote: kiln: …") and the
// hook still exits 0: post-receive runs after the refs moved, so failing
// could not undo the push. Every value is single-quoted for sh.
func HookScript(cfg HookConfig) (string, error) {
	if !nameRE().MatchString(cfg.Source) {
		return "", kiln.Errorf(kiln.CodeInvalid, "source name %q is not valid", cfg.Source)
	}
	bin := cmpOr(cfg.Kiln, "kiln")
	if strings.ContainsAny(bin, "\x00\n") {
		return "", kiln.Errorf(kiln.CodeInvalid, "the kiln executable path contains a newline or NUL")
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString(hookMarker + " for source " + cfg.Source + ".\n")
	b.WriteString("# Written by kiln; reinstalling replaces it. For each updated branch or tag it\n")
	b.WriteString("# asks the kiln server to run the matching workflows. It cannot reject a push.\n")
	b.WriteString("kiln=" + shellQuote(bin) + "\n")
	b.WriteString("source=" + shellQuote(cfg.Source) + "\n")
	for _, e := range cfg.Env {
		if !envNameRE.MatchString(e.Name) {
			return "", kiln.Errorf(kiln.CodeInvalid, "environment variable name %q is not valid", e.Name)
		}
		if strings.ContainsRune(e.Value, 0) {
			return "", kiln.Errorf(kiln.CodeInvalid, "environment variable %s contains a NUL byte", e.Name)
		}
		b.WriteString("export " + e.Name + "=" + shellQuote(e.Value) + "\n")
	}
	b.WriteString(`while read -r old new ref; do
	case $new in
	*[!0]*) ;;
	*) continue ;; # all zeros (or nothing): the ref was deleted
	esac
	if ! "$kiln" trigger "$source" --ref "$ref" --sha "$new" --before "$old" </dev/null; then
		echo "kiln: could not trigger source $source for $ref; the push itself succeeded" >&2
	fi
done
exit 0
`)
	return b.String(), nil
}

// shellQuote single-quotes s for sh; a quote inside s is written as close
// quote, backslash-escaped quote, open quote.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// InstallHook writes the post-receive hook into a local source's
// repository (where git looks for hooks, honouring core.hooksPath) and
// returns its path. An existing hook kiln did not write is left alone
// (CodeConflict) unless force is set.
func InstallHook(ctx context.Context, src *Source, cfg HookConfig, force bool, opts Options) (string, error) {
	if src.Kind != kiln.SourceLocal || src.Local == nil {
		return "", kiln.Errorf(kiln.CodeInvalid, "source %s is not a local source", src.Name)
	}
	cfg.Source = src.Name
	script, err := HookScript(cfg)
	if err != nil {
		return "", err
	}
	opts = opts.withDefaults()
	g := gitRepo{git: opts.Git, dir: src.Local.Path}
	out, err := g.run(ctx, gitMaxSmall, "rev-parse", "--git-path", "hooks")
	if err != nil {
		return "", kiln.Errorf(kiln.CodeNotFound, "source %s: %s is not a git repository kiln can read", src.Name, src.Local.Path)
	}
	dir := strings.TrimSpace(string(out))
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(src.Local.Path, dir)
	}
	hook := filepath.Join(dir, "post-receive")
	if old, err := os.ReadFile(hook); err == nil && !strings.Contains(string(old), hookMarker) && !force {
		return "", kiln.Errorf(kiln.CodeConflict, "%s already exists and kiln did not write it; call kiln trigger from it yourself, or replace it with --force", hook)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", kiln.Errorf(kiln.CodeUnavailable, "could not create %s: %v", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".post-receive-*")
	if err != nil {
		return "", kiln.Errorf(kiln.CodeUnavailable, "could not write the hook in %s: %v", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(script); err != nil {
		tmp.Close()
		return "", kiln.Errorf(kiln.CodeUnavailable, "could not write %s: %v", hook, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", kiln.Errorf(kiln.CodeUnavailable, "could not make %s executable: %v", hook, err)
	}
	if err := tmp.Close(); err != nil {
		return "", kiln.Errorf(kiln.CodeUnavailable, "could not write %s: %v", hook, err)
	}
	if err := os.Rename(tmp.Name(), hook); err != nil {
		return "", kiln.Errorf(kiln.CodeUnavailable, "could not install %s: %v", hook, err)
	}
	return hook, nil
}
