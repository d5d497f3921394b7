package archmap

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsLinks checks that every relative link in README.md and
// docs/*.md names a file or directory that exists, and that its #anchor,
// on a Markdown page, is a heading of that page.
func TestDocsLinks(t *testing.T) {
	root := moduleRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	for _, p := range brokenLinks(t, root, pages) {
		t.Error(p)
	}
}

// TestDocsLinksFindsBrokenOnes: the check itself sees a missing file and a
// missing anchor, and accepts the anchors GitHub makes.
func TestDocsLinksFindsBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	page := "# A page\n\n## `store.tls`, again: TLS!\n\n## A page\n\n```\n## not a heading\n[skipped](nowhere.md)\n```\n" +
		"[ok](#storetls-again-tls) [dup](#a-page-1) [file](b.md#b_c) [code `x`](#a-page)\n" +
		"[gone](missing.md) [no anchor](#not-a-heading) [other](b.md#nope) [web](https://example.com/x#y)\n"
	if err := os.WriteFile(filepath.Join(dir, "a.md"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.md"), []byte("## B_c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := brokenLinks(t, dir, []string{filepath.Join(dir, "a.md")})
	want := []string{
		"a.md: missing.md: no such file",
		"a.md: #not-a-heading: a.md has no such heading",
		"a.md: b.md#nope: b.md has no such heading",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var (
	fence      = regexp.MustCompile("(?ms)^ *(```|~~~).*?^ *(```|~~~)[^\n]*$")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.*?)[ \t#]*$`)
	link       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N}\p{M} _-]`)
	hasAScheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// brokenLinks lists each relative link of pages that does not resolve, as
// "page: link: why", page relative to root.
func brokenLinks(t *testing.T, root string, pages []string) []string {
	t.Helper()
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path]
	}
	var broken []string
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		text := codeSpan.ReplaceAllString(fence.ReplaceAllString(string(b), ""), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if hasAScheme.MatchString(target) {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				if _, err := os.Stat(path); err != nil {
					broken = append(broken, fmt.Sprintf("%s: %s: no such file", rel, target))
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchorsOf(path)[frag] {
				name, _ := filepath.Rel(root, path)
				broken = append(broken, fmt.Sprintf("%s: %s: %s has no such heading", rel, target, filepath.ToSlash(name)))
			}
		}
	}
	return broken
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown page: lower case, spaces as '-', punctuation but '-' and '_'
// dropped, a repeated anchor suffixed -1, -2, ...; fenced code is skipped.
func headingAnchors(page string) map[string]bool {
	seen := map[string]int{}
	anchors := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(page, ""), -1) {
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			anchors[fmt.Sprintf("%s-%d", slug, n+1)] = true
			continue
		}
		seen[slug] = 0
		anchors[slug] = true
	}
	return anchors
}
