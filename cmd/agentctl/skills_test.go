package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/wire"
)

// writeSkills writes files (relative path -> content) under a new
// directory and returns it.
func writeSkills(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o700))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o600))
	}
	return dir
}

// agentctl skills import reads <DIR>/<name>/SKILL.md (front matter name
// and description, the rest the body); ls, show and rm follow. A bad
// file imports nothing and is named, with its line where there is one.
func TestSkillsCLI(t *testing.T) {
	c := newCLI(t)
	code, _, stderr := c.run("tenants", "create", "acme")
	require.Equal(t, exitOK, code, stderr)

	dir := writeSkills(t, map[string]string{
		"csv-summary/SKILL.md": "---\nname: csv-summary\ndescription: Summarise a CSV file by column\n---\n\n# Steps\n\n1. fetch the file\n2. count\n",
		"pdf/SKILL.md":         "---\r\ndescription: Read the text of a PDF\r\nagents: [reader]\r\n---\r\nUse the pdf API.\r\n",
		"notes.txt":            "not a skill",
		"empty/README.md":      "no SKILL.md here",
	})
	code, out, stderr := c.run("skills", "import", "--tenant", "acme", dir)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "skill csv-summary imported from "+filepath.Join(dir, "csv-summary", "SKILL.md"))
	require.Contains(t, out, "skill pdf imported", "the directory's name when the front matter names none")

	code, out, stderr = c.run("skills", "ls", "--tenant", "acme", "--json")
	require.Equal(t, exitOK, code, stderr)
	var list wire.SkillList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Skills, 2)
	code, out, _ = c.run("skills", "ls", "--tenant", "acme")
	require.Equal(t, exitOK, code)
	require.Regexp(t, `csv-summary\s+imported\s+\*\s+.*Summarise a CSV file by column`, out)
	require.Regexp(t, `pdf\s+imported\s+reader\s+`, out)

	code, out, stderr = c.run("skills", "show", "--tenant", "acme", "csv-summary")
	require.Equal(t, exitOK, code, stderr)
	var sk agentfleet.Skill
	require.NoError(t, json.Unmarshal([]byte(out), &sk))
	require.Equal(t, "# Steps\n\n1. fetch the file\n2. count\n", sk.Body)
	code, out, _ = c.run("skills", "show", "--tenant", "acme", "pdf")
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &sk))
	require.Equal(t, "Use the pdf API.\n", sk.Body, "CRLF files read as LF")
	require.Equal(t, []string{"reader"}, sk.Agents)

	code, out, _ = c.run("skills", "rm", "--tenant", "acme", "pdf")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "skill pdf deleted")
	code, _, stderr = c.run("skills", "show", "--tenant", "acme", "pdf")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "pdf")

	// Bad files: nothing imported, each named.
	big := "---\nname: big\ndescription: too big\n---\n" + strings.Repeat("x", agentfleet.SkillBodyMaxBytes)
	bad := writeSkills(t, map[string]string{
		"good/SKILL.md":   "---\ndescription: fine\n---\nbody\n",
		"plain/SKILL.md":  "# no front matter\n",
		"big/SKILL.md":    big,
		"open/SKILL.md":   "---\ndescription: never closed\nbody\n",
		"typo/SKILL.md":   "---\ndescription: x\nagnets: [a]\n---\n",
		"fetch/SKILL.md":  "---\ndescription: shadows a primitive\n---\n",
		"nodesc/SKILL.md": "---\nname: nodesc\n---\nbody\n",
	})
	code, _, stderr = c.run("skills", "import", "--tenant", "acme", bad)
	require.Equal(t, exitUsage, code, stderr)
	for _, want := range []string{
		filepath.Join(bad, "plain", "SKILL.md") + ": line 1: no front matter",
		filepath.Join(bad, "big", "SKILL.md") + ": ",
		"over the 64 KiB a skill may have",
		filepath.Join(bad, "open", "SKILL.md") + ": the front matter that starts on line 1 has no closing '---' line",
		filepath.Join(bad, "typo", "SKILL.md") + ": front matter: line 3: unknown field agnets (a front matter has name, description, agents)",
		filepath.Join(bad, "fetch", "SKILL.md") + ": ",
		filepath.Join(bad, "nodesc", "SKILL.md") + ": the front matter has no description",
	} {
		require.Contains(t, stderr, want)
	}
	code, out, _ = c.run("skills", "ls", "--tenant", "acme", "--json")
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Skills, 1, "the good file of a bad import was not imported either")

	code, _, stderr = c.run("skills", "import", "--tenant", "acme", t.TempDir())
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "holds no <name>/SKILL.md")
}
