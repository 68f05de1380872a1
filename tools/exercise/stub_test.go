// SPDX-License-Identifier: Apache-2.0

// Tests of stubbing and break edits, on small packages written for the purpose.
package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func stubMessage(name string) string { return "implement " + name }

// lastElement names packages as the standard library does, without running the go command.
func lastElement(dir string, paths []string) (map[string]string, error) {
	names := map[string]string{}
	for _, p := range paths {
		names[p] = p[strings.LastIndexByte(p, '/')+1:]
	}
	return names, nil
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// importsOf lists a file's imports as "path" or "name path".
func importsOf(t *testing.T, src []byte) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("stubbed file does not parse: %v\n%s", err, src)
	}
	var out []string
	for _, s := range f.Imports {
		p, _ := strconv.Unquote(s.Path.Value)
		if s.Name != nil {
			p = s.Name.Name + " " + p
		}
		out = append(out, p)
	}
	return out
}

// A stubbed file must still build: the imports only the stubbed bodies used go, the others stay,
// whatever their package names (two here differ from their paths, one as another's path).
func TestStubKeepsPackageBuilding(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"go.mod":        "module example.com/m\n\ngo 1.22\n",
		"lib/lib.go":    "package other\n\nfunc Hello() string { return \"hello\" }\n",
		"thing/t.go":    "package thing\n\nfunc Name() string { return \"thing\" }\n",
		"other/used.go": "package used\n\nfunc Used() int { return 1 }\n",
	})
	src := `// Package main is a test subject.
package main

import (
	"fmt"
	"os/exec" // only in run
	str "strings"

	_ "embed"
	. "math"

	"example.com/m/lib"   // package other, only in run
	"example.com/m/other" // package used, kept
	"example.com/m/thing" // used in both
)

// run is stubbed.
func run(args []string) (int, error) {
	// A comment inside the body goes with it.
	out, err := exec.Command(str.Join(args, " ")).Output()
	fmt.Println(other.Hello(), thing.Name(), len(out))
	return 0, err
}

func main() {
	fmt.Println(Pi, used.Used(), thing.Name())
	n, err := run(nil)
	fmt.Println(n, err)
}
`
	file := filepath.Join(dir, "main.go")
	out, stubbed, dropped, err := stubFile(file, []byte(src), []string{"run"}, stubMessage, goListNames)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stubbed, []string{"run"}) {
		t.Errorf("stubbed %v, want [run]", stubbed)
	}
	slices.Sort(dropped)
	if want := []string{"example.com/m/lib", "os/exec", "strings"}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	want := []string{"fmt", "_ embed", ". math", "example.com/m/other", "example.com/m/thing"}
	if got := importsOf(t, out); !slices.Equal(got, want) {
		t.Errorf("imports %v, want %v\n%s", got, want, out)
	}
	if strings.Contains(string(out), "goes with it") || !strings.Contains(string(out), "// run is stubbed.") {
		t.Errorf("comments: the body's should go, the doc comment stay:\n%s", out)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	vet := exec.Command("go", "vet", "./...")
	vet.Dir = dir
	vet.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if msg, err := vet.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the stubbed package: %v\n%s\n%s", err, msg, out)
	}
}

func TestStubMethods(t *testing.T) {
	src := `package p

import "errors"

type reaper struct{}
type list[T any] struct{ items []T }

func Start() error { return errors.New("function, not the method") }

func (r *reaper) Start() error { return errors.New("pointer receiver") }

func (r reaper) Stop() error { return errors.New("value receiver") }

func (l *list[T]) Len() int { return len(l.items) }
`
	out, stubbed, dropped, err := stubFile("p.go", []byte(src), []string{"reaper.Start", "reaper.Stop", "list.Len"}, stubMessage, lastElement)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(stubbed)
	if want := []string{"list.Len", "reaper.Start", "reaper.Stop"}; !slices.Equal(stubbed, want) {
		t.Errorf("stubbed %v, want %v", stubbed, want)
	}
	if len(dropped) != 0 {
		t.Errorf("dropped %v; errors is still used by the function Start", dropped)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", out, 0)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		body := string(out[fset.Position(fd.Body.Lbrace).Offset : fset.Position(fd.Body.Rbrace).Offset+1])
		stub := strings.Contains(body, `panic("implement `+funcKey(fd)+`")`)
		if stub != (fd.Recv != nil) {
			t.Errorf("%s: stubbed %v, want %v; body %s", funcKey(fd), stub, fd.Recv != nil, body)
		}
	}
}

func TestStubDropsWholeImportDecl(t *testing.T) {
	src := "package p\n\nimport \"strings\"\n\nfunc up(s string) string { return strings.ToUpper(s) }\n"
	out, _, dropped, err := stubFile("p.go", []byte(src), []string{"up"}, stubMessage, lastElement)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dropped, []string{"strings"}) || strings.Contains(string(out), "import") {
		t.Errorf("dropped %v, file:\n%s", dropped, out)
	}
}

func TestStubUnknownFunction(t *testing.T) {
	src := []byte("package p\n\nfunc a() {}\n")
	out, stubbed, _, err := stubFile("p.go", src, []string{"b"}, stubMessage, lastElement)
	if err != nil || len(stubbed) != 0 || string(out) != string(src) {
		t.Errorf("stubbing an absent function: %v, %v, %q", err, stubbed, out)
	}
}

func TestApplyEdit(t *testing.T) {
	src := []byte("a := 1\nb := 2\nb := 2\n")
	for _, tc := range []struct {
		old, wantErr, want string
	}{
		{"a := 1", "", "a := 0\nb := 2\nb := 2\n"},
		{"c := 3", "not found", ""},
		{"b := 2", "occurs 2 times", ""},
		{"", "empty", ""},
	} {
		got, err := applyEdit(src, Edit{File: "f.go", Old: tc.old, New: "a := 0"})
		switch {
		case tc.wantErr == "" && (err != nil || string(got) != tc.want):
			t.Errorf("edit %q: %q, %v; want %q", tc.old, got, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("edit %q: error %v, want one saying %q", tc.old, err, tc.wantErr)
		}
	}
}
