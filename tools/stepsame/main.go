// SPDX-License-Identifier: Apache-2.0

// Command stepsame finds code that must change together ("fixes travel both ways"): files
// byte-identical across steps (a fix in one belongs in all), and functions of final/ whose
// counterpart in the newest step that has one (same name, case aside, on the matching type)
// has a different body. known.txt lists each such pair with a fingerprint of both bodies and
// the reason they differ; a pair not listed, or one whose body changed on either side since it
// was listed, is named, so that a fix made on one side is looked at on the other.
package main

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	check := flag.Bool("check", false, "fail when a pair is new, changed since known.txt listed it, or gone")
	update := flag.Bool("update", false, "write the current fingerprints (and new pairs, without a reason) to known.txt")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	out, ok, err := report(root, *check, *update)
	fmt.Print(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepsame:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// fn is one function declaration: where it is and a fingerprint of its body.
type fn struct {
	file, name string // name as Recv.Name or Name
	body       string // sha256 of the body printed without comments
	stub       bool   // a step's RPC that only says which step adds it
}

// finalType is the type of final/ that plays the part of a step's receiver type.
var finalType = map[string]string{
	"service": "service", "initprocess": "init", "reaper": "reaper", "publisher": "publisher",
	"stdio": "pipes", "exitqueue": "queue", "exitrecord": "exitrecord",
}

// key pairs counterparts: type and name, lower-cased (final exports what a step keeps private),
// the step's receiver type translated to final's.
func key(name string, step bool) string {
	name = strings.ToLower(name)
	if recv, method, ok := strings.Cut(name, "."); ok && step {
		if t, ok := finalType[recv]; ok {
			recv = t
		}
		return recv + "." + method
	}
	return name
}

// funcs parses the non-test Go files below dir.
func funcs(root, dir string) ([]fn, error) {
	var out []fn
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			d, ok := decl.(*ast.FuncDecl)
			if !ok || d.Body == nil {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = recvType(d.Recv.List[0].Type) + "." + name
			}
			body := tokens(fset, src, d.Body)
			sum := sha256.Sum256([]byte(body))
			stub := strings.Contains(body, "notyet (")
			out = append(out, fn{file: filepath.ToSlash(rel), name: name, body: fmt.Sprintf("%x", sum[:6]), stub: stub})
		}
		return nil
	})
	return out, err
}

// tokens is body as a string of its tokens, comments and layout left out and identifiers
// lower-cased, a step's type names translated to final's: a comment, a blank line or an
// exported name is no difference between two copies.
func tokens(fset *token.FileSet, src []byte, body *ast.BlockStmt) string {
	file := fset.File(body.Pos())
	part := src[file.Offset(body.Pos()):file.Offset(body.End())]
	var sc scanner.Scanner
	sc.Init(token.NewFileSet().AddFile("", -1, len(part)), part, nil, 0)
	var b strings.Builder
	for {
		_, tok, lit := sc.Scan()
		if tok == token.EOF {
			return b.String()
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue
		}
		switch {
		case tok == token.IDENT:
			lit = strings.ToLower(lit)
			if t, ok := finalType[lit]; ok {
				lit = t
			}
		case lit == "":
			lit = tok.String()
		}
		b.WriteString(lit + " ")
	}
}

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// stepOf is "04" for steps/04-subreaper/x.go.
func stepOf(file string) string {
	parts := strings.Split(file, "/")
	if len(parts) > 1 && len(parts[1]) >= 2 {
		return parts[1][:2]
	}
	return file
}

// counterparts lists, for each final/ function with a step counterpart, the steps whose copy
// differs from it, as "final/file Name | steps 03,04 name". Only the newest step that carries
// the function is compared: earlier steps carry what the newest does or less.
func counterparts(root string) ([]string, error) {
	final, err := funcs(root, "final/shim")
	if err != nil {
		return nil, err
	}
	more, err := funcs(root, "final/internal")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	final = append(final, more...)
	steps, err := funcs(root, "steps")
	if err != nil {
		return nil, err
	}
	newest := map[string]fn{} // key -> the newest step's copy
	for _, s := range steps {
		if s.stub {
			continue
		}
		k := key(s.name, true)
		if cur, ok := newest[k]; !ok || stepOf(s.file) > stepOf(cur.file) {
			newest[k] = s
		}
	}
	var lines []string
	for _, f := range final {
		s, ok := newest[key(f.name, false)]
		if !ok || s.body == f.body {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %s %s | %s %s %s", f.file, f.name, f.body, s.file, s.name, s.body))
	}
	sort.Strings(lines)
	return lines, nil
}

// identical lists, per file name found in several steps, the groups of byte-identical copies.
func identical(root string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(root, "steps", "*", "*"))
	if err != nil {
		return nil, err
	}
	groups := map[string]map[string][]string{} // name -> hash -> steps
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // a directory
		}
		sum := sha256.Sum256(data)
		name := filepath.Base(p)
		if groups[name] == nil {
			groups[name] = map[string][]string{}
		}
		h := fmt.Sprintf("%x", sum[:6])
		groups[name][h] = append(groups[name][h], filepath.Base(filepath.Dir(p))[:2])
	}
	var lines []string
	for name, byHash := range groups {
		var same []string
		for _, steps := range byHash {
			if len(steps) > 1 {
				sort.Strings(steps)
				same = append(same, strings.Join(steps, ","))
			}
		}
		if len(same) > 0 {
			sort.Strings(same)
			lines = append(lines, fmt.Sprintf("%-20s same in steps %s", name, strings.Join(same, ";")))
		}
	}
	sort.Strings(lines)
	return lines, nil
}

// entry is one pair of known.txt: the line as written and the reason below it.
type entry struct {
	line, reason string
}

// identity is a pair's line without its fingerprints: who the two functions are.
func identity(line string) string {
	var kept []string
	for i, f := range strings.Fields(line) {
		if i != 2 && i != 6 {
			kept = append(kept, f)
		}
	}
	return strings.Join(kept, " ")
}

// readKnown reads known.txt: "final-file Name fingerprint | step-file name fingerprint" lines,
// each followed by indented lines giving the reason; # starts a comment.
func readKnown(path string) (map[string]*entry, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	known := map[string]*entry{}
	var order []string
	var last *entry
	for n, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t"):
			if last == nil {
				return nil, nil, fmt.Errorf("%s:%d: a reason with no pair above it", path, n+1)
			}
			last.reason = strings.TrimSpace(last.reason + " " + strings.TrimSpace(line))
		default:
			line = strings.TrimSpace(line)
			if len(strings.Fields(line)) != 7 {
				return nil, nil, fmt.Errorf("%s:%d: want \"file Name fingerprint | file name fingerprint\"", path, n+1)
			}
			id := identity(line)
			if _, dup := known[id]; dup {
				return nil, nil, fmt.Errorf("%s:%d: %q listed twice", path, n+1, id)
			}
			last = &entry{line: line}
			known[id] = last
			order = append(order, id)
		}
	}
	return known, order, nil
}

// report renders both lists. With check, ok is false when a pair is missing from known.txt, its
// fingerprints changed (a side was edited: see whether the other needs the same), it has no
// reason, or a listed pair no longer differs (the copies were brought together: it goes). With
// update, known.txt takes the current fingerprints, and new pairs are added without a reason.
func report(root string, check, update bool) (string, bool, error) {
	var b strings.Builder
	same, err := identical(root)
	if err != nil {
		return "", false, err
	}
	b.WriteString("Files byte-identical across steps (a fix in one belongs in all):\n")
	for _, l := range same {
		b.WriteString("  " + l + "\n")
	}
	diff, err := counterparts(root)
	if err != nil {
		return b.String(), false, err
	}
	knownPath := filepath.Join(root, "tools", "stepsame", "known.txt")
	known, order, err := readKnown(knownPath)
	if err != nil {
		return b.String(), false, err
	}
	ok := true
	b.WriteString("\nfinal/ functions whose step counterpart differs (new: not in tools/stepsame/known.txt;\n" +
		"changed: a side was edited since it was listed; no reason: known.txt gives none):\n")
	seen := map[string]bool{}
	for _, l := range diff {
		id := identity(l)
		seen[id] = true
		mark := ""
		switch e, k := known[id]; {
		case !k:
			mark = "new: "
			known[id] = &entry{line: l}
			order = append(order, id)
		case e.line != l:
			mark = "changed: "
			e.line = l
		case e.reason == "":
			mark = "no reason: "
		}
		if mark != "" {
			ok = false
		}
		b.WriteString("  " + mark + l + "\n")
	}
	var kept []string
	for _, id := range order {
		if !seen[id] {
			ok = false
			b.WriteString("  gone (the copies agree now; drop it from known.txt): " + id + "\n")
			continue
		}
		kept = append(kept, id)
	}
	if !ok {
		b.WriteString("\nA fix made on one side may be missing on the other: carry it over, or give the reason the\n" +
			"copies differ in tools/stepsame/known.txt (go run ./tools/stepsame -update refreshes it).\n")
	}
	if update {
		var out strings.Builder
		out.WriteString(knownHeader)
		for _, id := range kept {
			e := known[id]
			out.WriteString("\n" + e.line + "\n")
			if e.reason != "" {
				out.WriteString("\t" + e.reason + "\n")
			}
		}
		if err := os.WriteFile(knownPath, []byte(out.String()), 0o644); err != nil {
			return b.String(), false, err
		}
	}
	return b.String(), ok || !check, nil
}

const knownHeader = `# Pairs of a final/ function and its counterpart in the newest step that has one, whose bodies
# differ on purpose. Each line: final's file, function and body fingerprint, then the step's; the
# indented line below says why they differ. make stepsame names every pair that is new, or whose
# fingerprint changed: a fix on one side that the other may need. Carry it over, or explain the
# difference, then run go run ./tools/stepsame -update to refresh the fingerprints.
`
