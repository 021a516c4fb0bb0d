package sandbox

import (
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// This file holds the text primitives that need no host: htmlToMarkdown
// and the markdown module. Both aim at what a model needs from a page -
// its structure and its words - not at round-tripping every construct.

// htmlToMarkdown renders an HTML document or fragment as Markdown:
// headings, paragraphs, links, images, lists (nested), code (inline and
// fenced), emphasis, block quotes, tables and rules. Scripts, styles and
// other non-content elements are dropped.
func htmlToMarkdown(src string) string {
	doc, err := html.Parse(strings.NewReader(src))
	if err != nil {
		// html.Parse only fails on reader errors; a string reader has none.
		return ""
	}
	var r mdRenderer
	blocks := r.blocks(doc)
	return strings.TrimSpace(strings.Join(blocks, "\n\n")) + "\n"
}

type mdRenderer struct{}

// dropped elements carry no readable content.
func dropped(a atom.Atom) bool {
	switch a {
	case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Head, atom.Svg,
		atom.Iframe, atom.Object, atom.Embed, atom.Canvas, atom.Math, atom.Select, atom.Button, atom.Input, atom.Textarea:
		return true
	}
	return false
}

func isBlock(a atom.Atom) bool {
	switch a {
	case atom.P, atom.Div, atom.Section, atom.Article, atom.Main, atom.Header, atom.Footer, atom.Nav,
		atom.Aside, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Ul, atom.Ol, atom.Li,
		atom.Pre, atom.Blockquote, atom.Table, atom.Thead, atom.Tbody, atom.Tfoot, atom.Tr, atom.Hr,
		atom.Figure, atom.Figcaption, atom.Dl, atom.Dt, atom.Dd, atom.Address, atom.Details,
		atom.Summary, atom.Form, atom.Fieldset, atom.Body, atom.Html, atom.Caption:
		return true
	}
	return false
}

// blocks renders n's children as a list of Markdown blocks: runs of inline
// content become paragraphs, block elements render themselves.
func (r *mdRenderer) blocks(n *html.Node) []string {
	var out []string
	var inline strings.Builder
	flush := func() {
		if t := tidyInline(inline.String()); t != "" {
			out = append(out, t)
		}
		inline.Reset()
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && dropped(c.DataAtom) {
			continue
		}
		if c.Type == html.ElementNode && isBlock(c.DataAtom) {
			flush()
			out = append(out, r.block(c)...)
			continue
		}
		if c.Type == html.DocumentNode {
			flush()
			out = append(out, r.blocks(c)...)
			continue
		}
		r.inline(&inline, c)
	}
	flush()
	return out
}

func (r *mdRenderer) block(n *html.Node) []string {
	switch n.DataAtom {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		t := tidyInline(r.inlineText(n))
		if t == "" {
			return nil
		}
		level := int(n.Data[1] - '0')
		return []string{strings.Repeat("#", level) + " " + strings.ReplaceAll(t, "\n", " ")}
	case atom.Hr:
		return []string{"---"}
	case atom.Pre:
		lang := ""
		code := n
		if c := n.FirstChild; c != nil && c.DataAtom == atom.Code && c.NextSibling == nil {
			code = c
			for _, a := range c.Attr {
				if a.Key == "class" {
					for _, cl := range strings.Fields(a.Val) {
						if l, ok := strings.CutPrefix(cl, "language-"); ok {
							lang = l
						}
					}
				}
			}
		}
		return []string{"```" + lang + "\n" + strings.TrimRight(textContent(code), "\n") + "\n```"}
	case atom.Ul, atom.Ol:
		return []string{r.list(n)}
	case atom.Blockquote:
		inner := strings.Join(r.blocks(n), "\n\n")
		if inner == "" {
			return nil
		}
		lines := strings.Split(inner, "\n")
		for i, l := range lines {
			if l == "" {
				lines[i] = ">"
			} else {
				lines[i] = "> " + l
			}
		}
		return []string{strings.Join(lines, "\n")}
	case atom.Table:
		return r.table(n)
	}
	return r.blocks(n)
}

// list renders ul/ol with nested lists indented under their item.
func (r *mdRenderer) list(n *html.Node) string {
	var lines []string
	i := 1
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.ElementNode || c.DataAtom != atom.Li {
			continue
		}
		marker := "- "
		if n.DataAtom == atom.Ol {
			marker = strconv.Itoa(i) + ". "
			i++
		}
		body := strings.Join(r.blocks(c), "\n")
		indent := strings.Repeat(" ", len(marker))
		for j, l := range strings.Split(body, "\n") {
			switch {
			case j == 0:
				lines = append(lines, marker+l)
			case l == "":
				lines = append(lines, "")
			default:
				lines = append(lines, indent+l)
			}
		}
	}
	return strings.Join(lines, "\n")
}

func (r *mdRenderer) table(n *html.Node) []string {
	var rows [][]string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type != html.ElementNode {
				continue
			}
			switch c.DataAtom {
			case atom.Tr:
				var row []string
				for td := c.FirstChild; td != nil; td = td.NextSibling {
					if td.DataAtom == atom.Td || td.DataAtom == atom.Th {
						cell := strings.ReplaceAll(tidyInline(r.inlineText(td)), "\n", " ")
						row = append(row, strings.ReplaceAll(cell, "|", "\\|"))
					}
				}
				if len(row) > 0 {
					rows = append(rows, row)
				}
			case atom.Thead, atom.Tbody, atom.Tfoot:
				walk(c)
			}
		}
	}
	walk(n)
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	for i, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |")
		if i == 0 {
			b.WriteString("\n|" + strings.Repeat(" --- |", len(row)))
		}
		if i < len(rows)-1 {
			b.WriteByte('\n')
		}
	}
	return []string{b.String()}
}

// inlineText renders n's children as inline Markdown, flattening any
// block structure inside (a heading containing a div).
func (r *mdRenderer) inlineText(n *html.Node) string {
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		r.inline(&b, c)
	}
	return b.String()
}

func (r *mdRenderer) inline(b *strings.Builder, n *html.Node) {
	switch n.Type {
	case html.TextNode:
		b.WriteString(n.Data)
		return
	case html.ElementNode:
	default:
		return
	}
	if dropped(n.DataAtom) {
		return
	}
	// wrap marks up n's text, keeping surrounding whitespace outside the
	// marks ("<b> x </b>" is " **x** "; "**x **" would not render).
	wrap := func(mark string) {
		inner := collapseSpace(r.inlineText(n))
		t := strings.TrimSpace(inner)
		if t == "" {
			b.WriteString(inner)
			return
		}
		if inner[0] == ' ' {
			b.WriteByte(' ')
		}
		b.WriteString(mark + t + mark)
		if inner[len(inner)-1] == ' ' {
			b.WriteByte(' ')
		}
	}
	switch n.DataAtom {
	case atom.A:
		t := strings.TrimSpace(collapseSpace(r.inlineText(n)))
		href := attr(n, "href")
		switch {
		case href == "" || strings.HasPrefix(strings.ToLower(href), "javascript:"):
			b.WriteString(t)
		case t == "":
			b.WriteString("<" + href + ">")
		default:
			b.WriteString("[" + t + "](" + href + ")")
		}
	case atom.Img:
		if src := attr(n, "src"); src != "" {
			b.WriteString("![" + attr(n, "alt") + "](" + src + ")")
		}
	case atom.Code, atom.Kbd, atom.Samp, atom.Tt:
		t := textContent(n)
		if t != "" {
			fence := "`"
			if strings.Contains(t, "`") {
				fence = "``"
			}
			b.WriteString(fence + t + fence)
		}
	case atom.Strong, atom.B:
		wrap("**")
	case atom.Em, atom.I:
		wrap("*")
	case atom.Del, atom.S, atom.Strike:
		wrap("~~")
	case atom.Br:
		b.WriteString(brMark)
	default:
		if isBlock(n.DataAtom) {
			// A block inside inline content (a div in a heading): keep
			// its words apart from its neighbours'.
			b.WriteString(" " + r.inlineText(n) + " ")
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			r.inline(b, c)
		}
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func textContent(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

var spaceRun = regexp.MustCompile(`[ \t\r\n\f]+`)

func collapseSpace(s string) string { return spaceRun.ReplaceAllString(s, " ") }

// brMark stands for a <br> in inline text until tidyInline turns it into a
// line break: newlines in HTML source are plain whitespace, a <br> is not.
const brMark = "\x00"

// tidyInline collapses whitespace, turns <br> marks into line breaks and
// trims the paragraph.
func tidyInline(s string) string {
	parts := strings.Split(collapseSpace(s), brMark)
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return strings.TrimSpace(strings.Join(parts, "\n"))
}

// ---- the markdown module ----

type mdHeading struct {
	Level int    `json:"level"`
	Text  string `json:"text"`
}

type mdLink struct {
	Text string `json:"text"`
	URL  string `json:"url"`
}

type mdSection struct {
	Heading string `json:"heading"`
	Level   int    `json:"level"`
	Body    string `json:"body"`
}

var (
	atxHeading   = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextH1     = regexp.MustCompile(`^ {0,3}=+[ \t]*$`)
	setextH2     = regexp.MustCompile(`^ {0,3}-+[ \t]*$`)
	fenceLine    = regexp.MustCompile("^ {0,3}(```+|~~~+)")
	inlineLink   = regexp.MustCompile(`(!?)\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refLink      = regexp.MustCompile(`(!?)\[([^\]]+)\]\[([^\]]*)\]`)
	refDef       = regexp.MustCompile(`^ {0,3}\[([^\]]+)\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	autoLink     = regexp.MustCompile(`<((?:https?|mailto|ftp):[^>\s]+)>`)
	codeSpan     = regexp.MustCompile("(`+)(.+?)(`+)")
	strongEm     = regexp.MustCompile(`(\*\*|__)(\S(?:.*?\S)?)(\*\*|__)`)
	em           = regexp.MustCompile(`(^|[^\w*])[*_](\S(?:[^*_]*?\S)?)[*_]([^\w*]|$)`)
	strike       = regexp.MustCompile(`~~(.+?)~~`)
	htmlTag      = regexp.MustCompile(`</?[a-zA-Z][^>]*>`)
	listMarker   = regexp.MustCompile(`^(\s*)(?:[-*+]|\d+[.)])\s+(\[[ xX]\]\s+)?`)
	quoteMarker  = regexp.MustCompile(`^\s{0,3}(?:>\s?)+`)
	hrLine       = regexp.MustCompile(`^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$`)
	tableSepLine = regexp.MustCompile(`^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$`)
)

// mdLine is one line of a Markdown document with what the block scan
// learned about it.
type mdLine struct {
	text    string
	code    bool // inside a fenced code block (or a fence line)
	heading int  // heading level, 0 if not a heading
	title   string
	under   bool // a setext underline, part of the heading above it
}

// scanMarkdown classifies lines: fenced code, ATX and setext headings.
func scanMarkdown(md string) []mdLine {
	raw := strings.Split(strings.ReplaceAll(md, "\r\n", "\n"), "\n")
	lines := make([]mdLine, len(raw))
	fence := ""
	for i, t := range raw {
		lines[i].text = t
		if fence != "" {
			lines[i].code = true
			if m := fenceLine.FindStringSubmatch(t); m != nil && strings.HasPrefix(m[1], fence) {
				fence = ""
			}
			continue
		}
		if m := fenceLine.FindStringSubmatch(t); m != nil {
			fence = m[1]
			lines[i].code = true
			continue
		}
		if m := atxHeading.FindStringSubmatch(t); m != nil {
			lines[i].heading = len(m[1])
			lines[i].title = inlinePlain(m[2])
			continue
		}
		if i > 0 && !lines[i-1].code && lines[i-1].heading == 0 && !lines[i-1].under {
			prev := strings.TrimSpace(raw[i-1])
			if prev != "" && !listMarker.MatchString(raw[i-1]) && !quoteMarker.MatchString(raw[i-1]) && !hrLine.MatchString(raw[i-1]) {
				level := 0
				if setextH1.MatchString(t) {
					level = 1
				} else if setextH2.MatchString(t) {
					level = 2
				}
				if level > 0 {
					lines[i-1].heading = level
					lines[i-1].title = inlinePlain(prev)
					lines[i].under = true
				}
			}
		}
	}
	return lines
}

func mdHeadings(md string) []mdHeading {
	out := []mdHeading{}
	for _, l := range scanMarkdown(md) {
		if l.heading > 0 {
			out = append(out, mdHeading{Level: l.heading, Text: l.title})
		}
	}
	return out
}

// mdLinks lists inline, reference and autolinks (not images) outside code,
// in document order.
func mdLinks(md string) []mdLink {
	lines := scanMarkdown(md)
	defs := map[string]string{}
	for _, l := range lines {
		if !l.code {
			if m := refDef.FindStringSubmatch(l.text); m != nil {
				defs[strings.ToLower(m[1])] = m[2]
			}
		}
	}
	out := []mdLink{}
	for _, l := range lines {
		if l.code || refDef.MatchString(l.text) {
			continue
		}
		t := codeSpan.ReplaceAllString(l.text, "")
		type hit struct {
			at   int
			link mdLink
		}
		var hits []hit
		for _, m := range inlineLink.FindAllStringSubmatchIndex(t, -1) {
			if t[m[2]:m[3]] == "!" {
				continue
			}
			hits = append(hits, hit{m[0], mdLink{Text: inlinePlain(t[m[4]:m[5]]), URL: t[m[6]:m[7]]}})
		}
		for _, m := range refLink.FindAllStringSubmatchIndex(t, -1) {
			if t[m[2]:m[3]] == "!" {
				continue
			}
			text := t[m[4]:m[5]]
			ref := t[m[6]:m[7]]
			if ref == "" {
				ref = text
			}
			if u, ok := defs[strings.ToLower(ref)]; ok {
				hits = append(hits, hit{m[0], mdLink{Text: inlinePlain(text), URL: u}})
			}
		}
		for _, m := range autoLink.FindAllStringSubmatchIndex(t, -1) {
			u := t[m[2]:m[3]]
			hits = append(hits, hit{m[0], mdLink{Text: u, URL: u}})
		}
		// Few hits per line: insertion order by position.
		for i := 1; i < len(hits); i++ {
			for j := i; j > 0 && hits[j].at < hits[j-1].at; j-- {
				hits[j], hits[j-1] = hits[j-1], hits[j]
			}
		}
		for _, h := range hits {
			out = append(out, h.link)
		}
	}
	return out
}

// mdSections splits md at its headings. Text before the first heading is a
// section with an empty heading and level 0.
func mdSections(md string) []mdSection {
	out := []mdSection{}
	cur := mdSection{}
	var body []string
	flush := func(force bool) {
		b := strings.Trim(strings.Join(body, "\n"), "\n")
		if force || b != "" || cur.Level > 0 {
			cur.Body = b
			out = append(out, cur)
		}
		body = body[:0]
	}
	for _, l := range scanMarkdown(md) {
		switch {
		case l.heading > 0:
			flush(false)
			cur = mdSection{Heading: l.title, Level: l.heading}
		case l.under:
		default:
			body = append(body, l.text)
		}
	}
	flush(false)
	return out
}

// mdText strips Markdown down to its words: markers, link targets and
// emphasis go, code and link text stay.
func mdText(md string) string {
	var out []string
	blank := true
	for _, l := range scanMarkdown(md) {
		var t string
		switch {
		case l.code:
			if fenceLine.MatchString(l.text) {
				continue
			}
			t = l.text
		case l.under, hrLine.MatchString(l.text), tableSepLine.MatchString(l.text), refDef.MatchString(l.text):
			continue
		case l.heading > 0:
			t = l.title
		default:
			t = quoteMarker.ReplaceAllString(l.text, "")
			t = listMarker.ReplaceAllString(t, "$1")
			if strings.Count(t, "|")-strings.Count(t, `\|`) >= 2 {
				row := strings.ReplaceAll(strings.TrimSpace(t), `\|`, "\x00")
				cells := strings.Split(strings.Trim(row, "|"), "|")
				for i, c := range cells {
					cells[i] = strings.ReplaceAll(strings.TrimSpace(c), "\x00", "|")
				}
				t = strings.Join(cells, "\t")
			}
			t = strings.TrimRight(inlinePlain(t), " \t")
		}
		if strings.TrimSpace(t) == "" {
			if !blank {
				out = append(out, "")
			}
			blank = true
			continue
		}
		out = append(out, t)
		blank = false
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

// inlinePlain removes inline Markdown from one line of text.
func inlinePlain(s string) string {
	s = inlineLink.ReplaceAllString(s, "$2")
	s = refLink.ReplaceAllString(s, "$2")
	s = autoLink.ReplaceAllString(s, "$1")
	s = codeSpan.ReplaceAllString(s, "$2")
	s = htmlTag.ReplaceAllString(s, "")
	s = strongEm.ReplaceAllString(s, "$2")
	s = strike.ReplaceAllString(s, "$1")
	s = em.ReplaceAllString(s, "$1$2$3")
	return strings.TrimSpace(s)
}
