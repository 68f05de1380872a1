// SPDX-License-Identifier: Apache-2.0

// Applying an exercise to a copy of its step: function bodies replaced by a panic (build) or one
// exact text edit (break). Bodies and imports are cut out of the source text by their AST
// positions rather than by rewriting the AST, so that every comment outside them stays where it
// was; go/format then tidies what is left.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// packageNamer returns the package name of each import path, as seen from the directory dir of
// the file being stubbed.
type packageNamer func(dir string, paths []string) (map[string]string, error)

// goListNames asks the go command, which knows the module's dependencies.
func goListNames(dir string, paths []string) (map[string]string, error) {
	args := append([]string{"list", "-e", "-f", "{{.ImportPath}} {{.Name}}"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w", strings.Join(paths, " "), err)
	}
	names := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if p, name, ok := strings.Cut(line, " "); ok && name != "" {
			names[p] = name
		}
	}
	return names, nil
}

// funcKey names a declaration as Exercise.Funcs does: "name" or "Type.Method".
func funcKey(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.IndexExpr: // generic receiver: list[T]
			t = x.X
		case *ast.IndexListExpr: // generic receiver: pair[K, V]
			t = x.X
		case *ast.Ident:
			return x.Name + "." + d.Name.Name
		default:
			return d.Name.Name
		}
	}
}

// stubFile replaces the bodies of the functions in want that src declares with
// panic(message(name)) and drops the imports that only those bodies used. It returns the
// formatted source, the names it stubbed and the import paths it dropped.
func stubFile(filename string, src []byte, want []string, message func(string) string, names packageNamer) ([]byte, []string, []string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse: %w", err)
	}
	var cuts []cut
	var stubbed []string
	for _, decl := range f.Decls {
		d, ok := decl.(*ast.FuncDecl)
		if !ok || !slices.Contains(want, funcKey(d)) {
			continue
		}
		if d.Body == nil {
			return nil, nil, nil, fmt.Errorf("%s has no body to replace", funcKey(d))
		}
		body := fmt.Sprintf("{\n\tpanic(%s)\n}", strconv.Quote(message(funcKey(d))))
		cuts = append(cuts, cut{fset.Position(d.Body.Lbrace).Offset, fset.Position(d.Body.Rbrace).Offset + 1, body})
		stubbed = append(stubbed, funcKey(d))
	}
	if len(cuts) == 0 {
		return src, nil, nil, nil
	}
	out := splice(src, cuts...)

	// Parse the stubbed text again: its positions are the ones the import cuts need.
	fset = token.NewFileSet()
	f, err = parser.ParseFile(fset, filename, out, parser.ParseComments)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse stubbed source: %w", err)
	}
	drop, err := unusedImports(f, filepath.Dir(filename), names)
	if err != nil {
		return nil, nil, nil, err
	}
	cuts = cuts[:0]
	var dropped []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		var gone []*ast.ImportSpec
		for _, s := range g.Specs {
			if spec := s.(*ast.ImportSpec); drop[spec] {
				gone = append(gone, spec)
				p, _ := strconv.Unquote(spec.Path.Value)
				dropped = append(dropped, p)
			}
		}
		// A declaration left without imports goes entirely, "import ()" being legal but odd.
		if len(gone) == len(g.Specs) && len(gone) > 0 {
			start, end := lineSpan(out, fset.Position(nodeStart(g.Doc, g.Pos())).Offset, fset.Position(g.End()).Offset)
			cuts = append(cuts, cut{start, end, ""})
			continue
		}
		for _, spec := range gone {
			end := spec.End()
			if spec.Comment != nil {
				end = spec.Comment.End()
			}
			start, stop := lineSpan(out, fset.Position(nodeStart(spec.Doc, spec.Pos())).Offset, fset.Position(end).Offset)
			cuts = append(cuts, cut{start, stop, ""})
		}
	}
	out = splice(out, cuts...)
	formatted, err := format.Source(out)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("format stubbed source: %w", err)
	}
	return formatted, stubbed, dropped, nil
}

// selectorRoots is the set of identifiers used as x in x.y: every use of an imported package
// has that form.
func selectorRoots(f *ast.File) map[string]bool {
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	return used
}

// unusedImports returns the imports of f that nothing in f uses any more. Package names come
// from the go command: guessing them from import paths goes wrong exactly for the imports whose
// names differ. Blank and dot imports are kept: their use is not visible as a name.
func unusedImports(f *ast.File, dir string, names packageNamer) (map[*ast.ImportSpec]bool, error) {
	name := map[*ast.ImportSpec]string{}
	var ask []string
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", spec.Path.Value, err)
		}
		switch {
		case p == "C" || spec.Name != nil && (spec.Name.Name == "_" || spec.Name.Name == "."):
		case spec.Name != nil:
			name[spec] = spec.Name.Name
		default:
			ask = append(ask, p)
		}
	}
	if len(ask) > 0 {
		real, err := names(dir, ask)
		if err != nil {
			return nil, fmt.Errorf("package names: %w", err)
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if spec.Name == nil && p != "C" {
				if real[p] == "" {
					return nil, fmt.Errorf("package name of %s: not found", p)
				}
				name[spec] = real[p]
			}
		}
	}
	used := selectorRoots(f)
	drop := map[*ast.ImportSpec]bool{}
	for spec, n := range name {
		if !used[n] {
			drop[spec] = true
		}
	}
	return drop, nil
}

func nodeStart(doc *ast.CommentGroup, pos token.Pos) token.Pos {
	if doc != nil {
		return doc.Pos()
	}
	return pos
}

// lineSpan widens [start, end) to whole lines when nothing else shares them, so that removing
// an import leaves no blank line behind.
func lineSpan(src []byte, start, end int) (int, int) {
	s := start
	for s > 0 && (src[s-1] == ' ' || src[s-1] == '\t') {
		s--
	}
	e := end
	for e < len(src) && (src[e] == ' ' || src[e] == '\t') {
		e++
	}
	if (s == 0 || src[s-1] == '\n') && (e == len(src) || src[e] == '\n') {
		if e < len(src) {
			e++
		}
		return s, e
	}
	return start, end
}

// cut is a byte range of a source file and the text that replaces it.
type cut struct {
	start, end int
	text       string
}

// splice replaces the given non-overlapping byte ranges of src.
func splice(src []byte, cuts ...cut) []byte {
	sort.Slice(cuts, func(i, j int) bool { return cuts[i].start < cuts[j].start })
	var b bytes.Buffer
	last := 0
	for _, c := range cuts {
		b.Write(src[last:c.start])
		b.WriteString(c.text)
		last = c.end
	}
	b.Write(src[last:])
	return b.Bytes()
}

// applyEdit makes a break exercise's edit, which must match exactly once.
func applyEdit(src []byte, e Edit) ([]byte, error) {
	if e.Old == "" {
		return nil, fmt.Errorf("edit of %s: empty Old text", e.File)
	}
	switch n := bytes.Count(src, []byte(e.Old)); n {
	case 1:
		return bytes.Replace(src, []byte(e.Old), []byte(e.New), 1), nil
	case 0:
		return nil, fmt.Errorf("edit of %s: %q not found (has the step changed?)", e.File, e.Old)
	default:
		return nil, fmt.Errorf("edit of %s: %q occurs %d times; it must occur once", e.File, e.Old, n)
	}
}
