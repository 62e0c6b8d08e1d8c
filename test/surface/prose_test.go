package surface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// maxSentenceWords is the longest sentence an exported name's doc comment
// under pkg/ may hold (CONTRIBUTING.md, "Doc comments").
const maxSentenceWords = 40

// TestDocSentencesAreShort measures the sentences of the doc comments of
// the exported names under pkg/. It fails on any sentence over
// maxSentenceWords and reports the mean, which the models keep at 12 to 15
// words.
func TestDocSentencesAreShort(t *testing.T) {
	t.Parallel()
	var sentences, words int
	var long []string
	err := filepath.WalkDir(filepath.Join(root(t), "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, string(filepath.Separator)+"internal"+string(filepath.Separator)) {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, doc := range exportedDocs(f) {
			for _, s := range docSentences(doc) {
				n := len(strings.Fields(s))
				sentences, words = sentences+1, words+n
				if n > maxSentenceWords {
					long = append(long, filepath.Base(path)+": "+s)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sentences, %.1f words on average, %d over %d words", sentences, float64(words)/float64(sentences), len(long), maxSentenceWords)
	if len(long) > 0 {
		t.Errorf("%d doc sentences run over %d words; split them:\n%s", len(long), maxSentenceWords, strings.Join(long, "\n"))
	}
}

// exportedDocs are the doc comments of f's package clause and of its
// exported functions, methods, types, fields, constants and variables.
func exportedDocs(f *ast.File) []*ast.CommentGroup {
	docs := []*ast.CommentGroup{f.Doc}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() {
				docs = append(docs, d.Doc)
			}
		case *ast.GenDecl:
			docs = append(docs, d.Doc)
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					docs = append(docs, s.Doc)
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, field := range st.Fields.List {
							if len(field.Names) > 0 && field.Names[0].IsExported() {
								docs = append(docs, field.Doc)
							}
						}
					}
				case *ast.ValueSpec:
					if s.Names[0].IsExported() {
						docs = append(docs, s.Doc)
					}
				}
			}
		}
	}
	return docs
}

// docSentences splits a doc comment's prose into sentences, leaving out
// code blocks and list markers.
func docSentences(doc *ast.CommentGroup) []string {
	if doc == nil {
		return nil
	}
	var prose []string
	for _, line := range strings.Split(doc.Text(), "\n") {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "# ") {
			prose = append(prose, "\n")
			continue
		}
		prose = append(prose, strings.TrimLeft(line, "-* "))
	}
	text := strings.Join(prose, " ")
	var out []string
	start := 0
	for i, r := range text {
		end := r == '\n'
		if (r == '.' || r == '?' || r == '!') && (i+1 == len(text) || unicode.IsSpace(rune(text[i+1]))) {
			end = true
		}
		if end {
			if s := strings.TrimSpace(text[start : i+1]); len(strings.Fields(s)) > 1 {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	if s := strings.TrimSpace(text[start:]); len(strings.Fields(s)) > 1 {
		out = append(out, s)
	}
	return out
}
