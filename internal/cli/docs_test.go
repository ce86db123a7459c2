package cli

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// documentedCommands are the kiln command lines in the code blocks of
// docs/cli.md and the README, with the shell around them (a leading "$ ",
// comments, redirections, pipes) taken off and the words split as a shell
// would.
func documentedCommands(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, doc := range []string{"../../docs/cli.md", "../../README.md"} {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		inCode, n := false, 0
		for sc.Scan() {
			n++
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "```") {
				inCode = !inCode
				continue
			}
			line = strings.TrimPrefix(line, "$ ")
			for strings.HasSuffix(line, "\\") && sc.Scan() { // a continued line
				n++
				line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
			}
			if !inCode || !strings.HasPrefix(line, "kiln ") && line != "kiln" {
				continue
			}
			for _, cut := range []string{"  #", " # ", " > ", " >> ", " | ", " 2>", " &&"} {
				line, _, _ = strings.Cut(line, cut)
			}
			out[filepath.Base(doc)+":"+strconv.Itoa(n)] = shellWords(line)[1:]
		}
		f.Close()
	}
	return out
}

// shellWords splits a command line into words, honouring single and
// double quotes.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	quote, in := rune(0), false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// B276: every kiln command line the README and docs/cli.md show names a
// command that exists, with flags it has and arguments it accepts, so the
// docs and the CLI cannot drift apart; the ones that need no server run,
// and succeed.
func TestDocumentedCommandsExist(t *testing.T) {
	cmds := documentedCommands(t)
	if len(cmds) < 40 {
		t.Fatalf("found only %d documented commands; is the extraction broken?", len(cmds))
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".kiln", "workflows"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeDoc(t, filepath.Join(dir, ".kiln", "workflows", "ci.yml"), "on: push\njobs:\n  build:\n    steps: [{run: make}]\n")
	offline := map[string]bool{"version": true, "completion": true, "lint": true, "help": true}
	for where, args := range cmds {
		e := &env{stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: &strings.Builder{}, getenv: func(string) string { return "" }}
		root := newRoot(e)
		cmd, rest, err := root.Find(args)
		if err != nil || (cmd == root && len(args) > 0) {
			t.Errorf("%s: kiln %s: no such command (%v)", where, strings.Join(args, " "), err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: kiln %s: %v", where, strings.Join(args, " "), err)
			continue
		}
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			t.Errorf("%s: kiln %s: %v", where, strings.Join(args, " "), err)
			continue
		}
		if len(args) > 0 && offline[args[0]] {
			wd, _ := os.Getwd()
			if err := os.Chdir(dir); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := runCLI(t, nil, args...)
			_ = os.Chdir(wd)
			if code != ExitOK {
				t.Errorf("%s: kiln %s: exit %d\n%s%s", where, strings.Join(args, " "), code, out, errOut)
			}
		}
	}
}

func writeDoc(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
