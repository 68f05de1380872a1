// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// extract returns the source of the declaration name in the Go file rel of root, with its doc
// comment: "f" for a function, "T.M" for a method of T or *T, "T" for a type, var or const.
func extract(root, rel, name string) (string, error) {
	if filepath.IsAbs(rel) || strings.HasPrefix(filepath.Clean(rel), "..") {
		return "", fmt.Errorf("%s: the path must be relative to the repository root", rel)
	}
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", rel, err)
	}
	recv, fn, isMethod := strings.Cut(name, ".")
	if !isMethod {
		fn = name
	}
	// A declaration is shown from the start of its first line, so that one inside a group keeps
	// its indentation on every line.
	text := func(from, to token.Pos) string {
		start := fset.Position(from).Offset
		for start > 0 && (src[start-1] == ' ' || src[start-1] == '\t') {
			start--
		}
		return string(src[start:fset.Position(to).Offset]) + "\n"
	}
	var found []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name != fn || (d.Recv != nil) != isMethod {
				continue
			}
			if isMethod && receiverName(d.Recv.List[0].Type) != recv {
				continue
			}
			found = append(found, text(docStart(d.Doc, d.Pos()), d.End()))
		case *ast.GenDecl:
			if isMethod {
				continue
			}
			for _, s := range d.Specs {
				if !specNames(s, name) {
					continue
				}
				if len(d.Specs) == 1 && d.Lparen == token.NoPos {
					found = append(found, text(docStart(d.Doc, d.Pos()), d.End()))
				} else {
					// One spec of a group: it alone, with its own doc comment.
					found = append(found, text(docStart(specDoc(s), s.Pos()), s.End()))
				}
			}
		}
	}
	switch len(found) {
	case 0:
		return "", errors.New(name + " is not declared in " + rel)
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("%s is declared %d times in %s", name, len(found), rel)
	}
}

// receiverName is T for a receiver of type T, *T, T[P] or *T[P].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func specNames(s ast.Spec, name string) bool {
	switch s := s.(type) {
	case *ast.TypeSpec:
		return s.Name.Name == name
	case *ast.ValueSpec:
		for _, n := range s.Names {
			if n.Name == name {
				return true
			}
		}
	}
	return false
}

func specDoc(s ast.Spec) *ast.CommentGroup {
	switch s := s.(type) {
	case *ast.TypeSpec:
		return s.Doc
	case *ast.ValueSpec:
		return s.Doc
	}
	return nil
}

func docStart(doc *ast.CommentGroup, pos token.Pos) token.Pos {
	if doc != nil {
		return doc.Pos()
	}
	return pos
}

// checkSnippets compares the snippet blocks of p with the source they name, or with update
// rewrites them. It reports whether p changed.
func checkSnippets(root string, p *page, update bool) (bool, []problem) {
	var probs []problem
	changed := false
	for i := range p.blocks {
		b := p.blocks[i]
		if b.kind != kindSnippet {
			continue
		}
		rel, name, ok := strings.Cut(strings.TrimSpace(b.arg), " ")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.Contains(name, " ") {
			probs = append(probs, problem{p.path, b.line, b.marker(), "want PATH NAME, as in steps/04-subreaper/reaper.go reapLoop"})
			continue
		}
		src, err := extract(root, rel, name)
		if err != nil {
			probs = append(probs, problem{p.path, b.line, b.marker(), err.Error()})
			continue
		}
		if p.content(b) == src {
			continue
		}
		if update {
			changed = p.replace(b, src) || changed
			continue
		}
		probs = append(probs, problem{p.path, b.line, b.marker(), "the block differs from the source (go test ./docs -update rewrites it)\n" + firstDifference(p.content(b), src)})
	}
	return changed, probs
}

// firstDifference shows the first line where got and want part.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("\tline %d of the block:\n\thave: %q\n\twant: %q", i+1, gl, wl)
		}
	}
	return ""
}
