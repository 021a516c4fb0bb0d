package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHTMLToMarkdown(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, html, want string }{
		{"headings and paragraphs", `<h1>Main   <em>Title</em></h1><p>First
			paragraph.</p><h3>Sub</h3><p>Second.</p>`, "# Main *Title*\n\nFirst paragraph.\n\n### Sub\n\nSecond.\n"},
		{"inline", `<p>Some <strong>bold</strong>, <i>italic</i>, <del>gone</del>, <code>x := 1</code>,<br>and a <a href="https://e.com/x">link</a>.</p>`,
			"Some **bold**, *italic*, ~~gone~~, `x := 1`,\nand a [link](https://e.com/x).\n"},
		{"links without text or href", `<p><a href="https://e.com"></a> <a>plain</a> <a href="javascript:void(0)">js</a></p>`, "<https://e.com> plain js\n"},
		{"lists", `<ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul><ol><li>first</li><li>second</li></ol>`,
			"- one\n- two\n  - nested\n\n1. first\n2. second\n"},
		{"code block", "<pre><code class=\"language-go\">func main() {\n\tfmt.Println(\"&lt;hi&gt;\")\n}\n</code></pre>", "```go\nfunc main() {\n\tfmt.Println(\"<hi>\")\n}\n```\n"},
		{"quote", `<blockquote><p>quoted</p><p>twice</p></blockquote>`, "> quoted\n>\n> twice\n"},
		{"table", `<table><thead><tr><th>Name</th><th>Price</th></tr></thead><tbody><tr><td>A|B</td><td>1.5</td></tr></tbody></table>`,
			"| Name | Price |\n| --- | --- |\n| A\\|B | 1.5 |\n"},
		{"image and rule", `<p><img src="/i.png" alt="pic"></p><hr><p>after</p>`, "![pic](/i.png)\n\n---\n\nafter\n"},
		{"dropped elements", `<html><head><title>T</title><style>p{}</style></head><body><script>var s = "<p>x</p>"</script><noscript>enable js</noscript><p>kept</p><svg><text>no</text></svg></body></html>`, "kept\n"},
		{"fragment text", `just text &amp; entities`, "just text & entities\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, htmlToMarkdown(c.html))
		})
	}
}

const sampleMD = `Intro text.

Setext Title
============

Body with [a link](https://a.example/x "title"), a [ref link][r], <https://auto.example/y>
and an image ![alt](/i.png) that is not a link.

## Sub ##

` + "```" + `
# not a heading
[not](a-link)
` + "```" + `

- item *em* and __strong__ and snake_case_word
> quote ~~del~~ and ` + "`code`" + `

| a | b |
|---|---|
| 1 | x\|y |

[r]: https://ref.example/page "T"
`

func TestMarkdownHeadings(t *testing.T) {
	t.Parallel()
	require.Equal(t, []mdHeading{{1, "Setext Title"}, {2, "Sub"}}, mdHeadings(sampleMD))
	require.Equal(t, []mdHeading{{3, "A link and code"}}, mdHeadings("### A [link](x) and `code` ###"))
	require.Equal(t, []mdHeading{}, mdHeadings("no headings\n#not one either"))
}

func TestMarkdownLinks(t *testing.T) {
	t.Parallel()
	require.Equal(t, []mdLink{
		{"a link", "https://a.example/x"},
		{"ref link", "https://ref.example/page"},
		{"https://auto.example/y", "https://auto.example/y"},
	}, mdLinks(sampleMD))
	require.Equal(t, []mdLink{}, mdLinks("`[in](code)` and ![img](/x.png)"))
}

func TestMarkdownSections(t *testing.T) {
	t.Parallel()
	secs := mdSections(sampleMD)
	require.Len(t, secs, 3)
	require.Equal(t, mdSection{Heading: "", Level: 0, Body: "Intro text."}, secs[0])
	require.Equal(t, "Setext Title", secs[1].Heading)
	require.Equal(t, 1, secs[1].Level)
	require.Contains(t, secs[1].Body, "Body with [a link]")
	require.Equal(t, "Sub", secs[2].Heading)
	require.Contains(t, secs[2].Body, "# not a heading", "code stays in the body")
	require.Equal(t, []mdSection{{Heading: "Empty", Level: 1, Body: ""}, {Heading: "Full", Level: 2, Body: "x"}}, mdSections("# Empty\n## Full\nx\n"))
}

func TestMarkdownText(t *testing.T) {
	t.Parallel()
	require.Equal(t, `Intro text.

Setext Title

Body with a link, a ref link, https://auto.example/y
and an image alt that is not a link.

Sub

# not a heading
[not](a-link)

item em and strong and snake_case_word
quote del and code

a	b
1	x|y`, mdText(sampleMD))
}
