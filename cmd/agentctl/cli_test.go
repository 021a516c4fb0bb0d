package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/cli.md's command reference from the command tree")

// TestMain runs agentctl itself when a completion script calls this test
// binary back (AGENTCTL_TEST_MAIN=1), as it calls agentctl's __complete.
func TestMain(m *testing.M) {
	if os.Getenv("AGENTCTL_TEST_MAIN") == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// commands is every command of the tree a user can call, depth first.
func commands() []*cobra.Command {
	var all []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		all = append(all, c)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() || s.Name() == "help" {
				walk(s)
			}
		}
	}
	root := cliEnv{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}.newRoot()
	root.InitDefaultHelpCmd()
	walk(root)
	return all
}

func path(c *cobra.Command) []string { return strings.Fields(commandName(c)) }

func agentctlOut(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// agentctl <every command> --help, and agentctl help <every command>,
// exit 0 with the command's usage line, a description and an example on
// stdout.
func TestHelpEveryCommand(t *testing.T) {
	all := commands()
	require.Greater(t, len(all), 50)
	for _, c := range all {
		p := path(c)
		if c == c.Root() {
			p = nil
		}
		for _, args := range [][]string{append(p[:len(p):len(p)], "--help"), append([]string{"help"}, p...), append(p[:len(p):len(p)], "-h")} {
			code, out, stderr := agentctlOut(args...)
			require.Equal(t, exitOK, code, "%v: %s", args, stderr)
			require.Empty(t, stderr, args)
			require.Regexp(t, `^Usage: `+regexp.QuoteMeta(c.CommandPath())+`( |\n)`, out, args)
			require.Contains(t, out, "\n\n"+cmp.Or(c.Long, c.Short)+"\n", args)
			require.Regexp(t, `\nExamples:\n  .*agentctl `, out, args)
			if c.HasAvailableFlags() && c.LocalNonPersistentFlags().HasAvailableFlags() {
				require.Contains(t, out, "\nFlags:\n", args)
			}
		}
	}
	// Flags show their defaults.
	_, out, _ := agentctlOut("runs", "ls", "--help")
	require.Regexp(t, `--limit int\s+page size \(default 20\)`, out)
	// The top-level help lists every command and the subcommands of each.
	_, out, _ = agentctlOut("--help")
	for _, c := range all[0].Commands() {
		if c.IsAvailableCommand() {
			require.Regexp(t, `(?m)^  `+c.Name()+` `, out)
		}
	}
	require.Contains(t, out, "set, ls, show, rm, rekey")
	code, _, _ := agentctlOut()
	require.Equal(t, exitUsage, code, "no command: the help, and a usage error")
}

// Mistakes on the command line exit 3 and say which flag or argument.
func TestUsageErrors(t *testing.T) {
	t.Setenv("AGENTFLEET_URL", "http://127.0.0.1:1") // nothing is reached
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"batch", "submit", "--foo", "in.jsonl"}, "agentctl batch submit: unknown flag --foo\nRun 'agentctl batch submit --help' for usage.\n"},
		{[]string{"runs", "ls", "-x"}, "agentctl runs ls: unknown flag -x\n"},
		{[]string{"runs", "ls", "-json"}, "agentctl runs ls: unknown flag -j in -json (a long flag takes two dashes: --json)\n"},
		{[]string{"--bogus"}, "agentctl: unknown flag --bogus\n"},
		{[]string{"runs", "ls", "--limit", "many"}, `agentctl runs ls: bad value "many" for --limit: want a whole number`},
		{[]string{"runs", "ls", "--limit"}, "agentctl runs ls: flag --limit needs a value"},
		{[]string{"run", "hi", "--wait=maybe"}, `agentctl run: bad value "maybe" for --wait: want true or false`},
		{[]string{"tenants", "nats-creds", "--ttl", "soon", "acme"}, `bad value "soon" for --ttl: want a duration like 30s`},
		{[]string{"bench", "--model-latency", "-1s"}, `bad value "-1s" for --model-latency: must not be negative`},
		{[]string{"run", "--context", "{", "hi"}, `--context "{" is not valid JSON`},
		{[]string{"run"}, "run takes one MESSAGE"},
		{[]string{"watch"}, "watch takes one RUN id"},
		{[]string{"batch", "submit"}, "batch submit takes one FILE"},
		{[]string{"tenants", "keys", "revoke", "acme"}, "KEY_ID"},
		{[]string{"runs", "ls", "extra"}, `runs ls takes no arguments (got "extra")`},
		{[]string{"runs"}, "runs needs a subcommand: ls, show, steps, cancel or rm"},
		{[]string{"runs", "lss"}, `unknown runs subcommand "lss" (did you mean ls?)`},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"help", "frob"}, `help: no command "frob"`},
		{[]string{"completion", "tcsh"}, `no script for shell "tcsh"`},
	} {
		code, out, stderr := agentctlOut(tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, tc.args)
		require.Empty(t, out, tc.args)
	}
}

// agentctl completion prints scripts the shells accept, and the tree
// answers their questions: subcommands, flags, a command's arguments.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, script, stderr := agentctlOut("completion", shell)
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, script, "agentctl", shell)
		require.Contains(t, script, "__complete", shell)
		bin, err := exec.LookPath(shell)
		if err != nil {
			if shell == "bash" {
				t.Fatal("bash is needed")
			}
			t.Logf("%s is not installed: its script's syntax is not checked", shell)
			continue
		}
		f := filepath.Join(t.TempDir(), "agentctl."+shell)
		require.NoError(t, os.WriteFile(f, []byte(script), 0o600))
		out, err := exec.Command(bin, "-n", f).CombinedOutput()
		require.NoError(t, err, "%s -n: %s", shell, out)
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", ""}, []string{"run", "runs", "batch", "completion"}},
		{[]string{"__complete", "batch", ""}, []string{"submit", "results", "retry"}},
		{[]string{"__complete", "batch", "submit", "--"}, []string{"--max-concurrent", "--wait", "--out"}},
		{[]string{"__complete", "tenants", "keys", ""}, []string{"create", "ls", "revoke"}},
		{[]string{"__complete", "completion", ""}, []string{"bash", "zsh", "fish"}},
		{[]string{"__complete", "bench", ""}, []string{"throughput", "chaos"}},
		{[]string{"__complete", "help", "batch", ""}, []string{"submit"}},
	} {
		code, out, stderr := agentctlOut(tc.args...)
		require.Equal(t, exitOK, code, stderr)
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
		}
		for _, w := range tc.want {
			require.Contains(t, got, w, tc.args)
		}
	}

	// The bash script in bash, completing through agentctl (this test
	// binary, called back) as a user's Tab would.
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "agentctl"), []byte("#!/bin/sh\nAGENTCTL_TEST_MAIN=1 exec "+exe+" \"$@\"\n"), 0o700))
	complete := func(line string) []string {
		// _get_comp_words_by_ref is bash-completion's; a stand-in where
		// that is not installed.
		script := `[ -r /usr/share/bash-completion/bash_completion ] && source /usr/share/bash-completion/bash_completion
declare -F _get_comp_words_by_ref >/dev/null || _get_comp_words_by_ref() {
	cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cword=$COMP_CWORD; words=("${COMP_WORDS[@]}")
}
source <(agentctl completion bash)
COMP_LINE="` + line + `"; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
__start_agentctl
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr // bash says compopt is out of a real completion
		out, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		return strings.Fields(string(out))
	}
	require.Equal(t, []string{"submit"}, complete("agentctl batch su"))
	require.Subset(t, complete("agentctl runs "), []string{"ls", "show", "steps", "cancel", "rm"})
	require.Contains(t, complete("agentctl batch submit --max-c"), "--max-concurrent")
}

// docs/cli.md's command reference is the tree's: go test ./cmd/agentctl
// -run TestDocsCommandReference -update rewrites it.
func TestDocsCommandReference(t *testing.T) {
	const file = "../../docs/cli.md"
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	doc := string(raw)
	const begin, end = "<!-- commands:begin (generated from the command tree: go test ./cmd/agentctl -run TestDocsCommandReference -update) -->\n", "<!-- commands:end -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	require.True(t, i >= 0 && j > i, "docs/cli.md has the markers of its command reference")
	want := commandReference(commands())
	if *updateDocs {
		doc = doc[:i+len(begin)] + want + doc[j:]
		require.NoError(t, os.WriteFile(file, []byte(doc), 0o644))
		return
	}
	require.Equal(t, want, doc[i+len(begin):j], "docs/cli.md's command reference drifted from the tree: rerun with -update")
}

// commandReference is the markdown table of every command that runs.
func commandReference(all []*cobra.Command) string {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("| Command | What it does | `--json` |\n| --- | --- | --- |\n")
	for _, c := range all {
		if c.HasAvailableSubCommands() || c == c.Root() {
			continue
		}
		json := ""
		if c.LocalFlags().Lookup("json") != nil {
			json = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", cell(c.UseLine()), cell(c.Short), json)
	}
	return b.String()
}

// jsonParses checks that out is one JSON document or, for a stream, a
// sequence of JSON values (events one a line, as jq reads them).
func jsonParses(t *testing.T, out string, stream bool) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	n := 0
	for ; ; n++ {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			break
		}
		require.NoError(t, err, out)
	}
	if stream {
		require.Positive(t, n, "values in %q", out)
	} else {
		require.Equal(t, 1, n, "one JSON document: %s", out)
	}
}
