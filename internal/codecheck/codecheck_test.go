package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	maxLines = 80 // a function's lines, its signature and closing brace included
	maxWords = 35 // a comment sentence's words, code spans counting one each
)

// longKept are the functions allowed past maxLines, and why.
var longKept = map[string]string{
	"h1.ParseRequest":             "a parser: one pass over the request head, in the order of RFC 9112",
	"h1.ParseResponse":            "a parser: one pass over the response head, in the order of RFC 9112",
	"storetest.timelines":         "a table: the conformance timelines, one literal",
	"storetest.CalendarTimelines": "a table: the calendar conformance timelines, one literal",
}

// skipped are the directories whose Go files are not product code.
var skipped = map[string]bool{
	"bench": true, "examples": true, "testdata": true, "tools": true,
	"internal/redistest": true, "internal/tlstest": true, "gateway/internal/h1/h1test": true,
}

// A product function longer than maxLines reads as several steps without
// names: split it, or keep it in longKept with the reason.
func TestFunctionsAreShort(t *testing.T) {
	fset, files := parse(t)
	seen := map[string]bool{}
	for path, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := f.Name.Name + "." + funcName(fn)
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if _, kept := longKept[name]; kept {
				seen[name] = true
				continue
			}
			if lines > maxLines {
				t.Errorf("%s:%d: %s is %d lines (at most %d): split it into named steps", path, fset.Position(fn.Pos()).Line, name, lines, maxLines)
			}
		}
	}
	for name := range longKept {
		if !seen[name] {
			t.Errorf("longKept names %s, which no longer exists: drop it", name)
		}
	}
}

// A comment sentence longer than maxWords says more than one thing: a
// contract is short sentences, one fact each.
func TestCommentSentencesAreShort(t *testing.T) {
	fset, files := parse(t)
	for path, f := range files {
		for _, g := range f.Comments {
			text := g.Text()
			if strings.HasPrefix(text, "Code generated") {
				continue
			}
			for _, s := range sentences(text) {
				if n := len(strings.Fields(s)); n > maxWords {
					t.Errorf("%s:%d: a comment sentence of %d words (at most %d): %.80s...", path, fset.Position(g.Pos()).Line, n, maxWords, s)
				}
			}
		}
	}
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	// A sentence ends at . ! ? or : (and a closing bracket or quote)
	// followed by a space and a capital, an opening bracket or quote, or a
	// list item.
	sentenceEnd = regexp.MustCompile(`([.!?:]["')\]]?)\s+([A-Z("'\-*]|\d+\.)`)
)

// sentences splits a comment's text into sentences: its paragraphs, list
// items and indented (code) blocks apart, code spans as one word.
func sentences(text string) []string {
	var out []string
	for _, para := range strings.Split(text, "\n\n") {
		var prose []string
		for _, line := range strings.Split(para, "\n") {
			if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "  ") {
				continue // code, or a table
			}
			if t := strings.TrimSpace(line); strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") {
				out = append(out, splitSentences(strings.Join(prose, " "))...)
				prose = nil
			}
			prose = append(prose, line)
		}
		out = append(out, splitSentences(strings.Join(prose, " "))...)
	}
	return out
}

func splitSentences(p string) []string {
	p = codeSpan.ReplaceAllString(p, "x")
	p = sentenceEnd.ReplaceAllString(p, "$1\x00$2")
	return strings.Split(p, "\x00")
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// parse reads every product Go file of the module: no tests, no test
// helpers, no examples, nothing under bench (its own module).
func parse(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || skipped[filepath.ToSlash(rel)]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("read %d product files under %s: expected the whole module", len(files), root)
	}
	return fset, files
}
