// SPDX-License-Identifier: Apache-2.0

// Keeps the exercise table honest as the steps change: every entry must still point at a step,
// functions, an edit and a test that exist. These checks need neither root nor a shim; whether
// the check really fails and passes is `verify`'s job.
package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shimwalk/shimwalk/tools/mdanchor"
)

func testRoot(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// declared returns the functions (as funcKey names them) declared by the step's non-test files
// and the test functions of its test files.
func declared(t *testing.T, dir string) (funcs, tests map[string]bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	funcs, tests = map[string]bool{}, map[string]bool{}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		isTest := strings.HasSuffix(file, "_test.go")
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			switch {
			case !ok:
			case !isTest:
				funcs[funcKey(fd)] = true
			case fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") && fd.Name.Name != "TestMain":
				tests[fd.Name.Name] = true
			}
		}
	}
	return funcs, tests
}

var (
	idPattern   = regexp.MustCompile(`^([0-9]{2})\.[1-9][0-9]*$`)
	stepPattern = regexp.MustCompile(`^([0-9]{2})-[a-z0-9-]+$`)
)

func TestExercisesAreConsistent(t *testing.T) {
	root := testRoot(t)
	seen := map[string]bool{}
	for _, ex := range exercises {
		t.Run(ex.ID, func(t *testing.T) {
			if seen[ex.ID] {
				t.Errorf("id %s is used twice", ex.ID)
			}
			seen[ex.ID] = true
			id, step := idPattern.FindStringSubmatch(ex.ID), stepPattern.FindStringSubmatch(ex.Step)
			switch {
			case id == nil:
				t.Errorf("id %q is not NN.N", ex.ID)
			case step == nil:
				t.Errorf("step %q is not NN-name", ex.Step)
			case id[1] != step[1]:
				t.Errorf("id %s belongs to step %s, not %s", ex.ID, id[1], ex.Step)
			}
			if ex.Title == "" || strings.Contains(ex.Title, "\n") || ex.Hint == "" {
				t.Errorf("title must be one line and hint non-empty: %q, %q", ex.Title, ex.Hint)
			}
			// The heading is "Exercise NN.N: ...", whose anchor begins so.
			prefix := "exercise-" + strings.ReplaceAll(ex.ID, ".", "") + "-"
			if !strings.HasPrefix(ex.Anchor, prefix) || mdanchor.Slug(ex.Anchor) != ex.Anchor {
				t.Errorf("anchor %q is not a heading anchor starting %q", ex.Anchor, prefix)
			}

			dir := filepath.Join(root, filepath.FromSlash(ex.testDir()))
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("tests: %v", err)
			}
			funcs, tests := declared(t, dir)
			if top, _, _ := strings.Cut(ex.Check, "/"); !tests[top] {
				t.Errorf("check %s: no test function %s in %s", ex.Check, top, ex.testDir())
			}
			if ex.Tests != "" && ex.Lib == "" {
				t.Errorf("an exercise whose check is outside its step must name the library it changes")
			}
			src := filepath.Join(root, filepath.FromSlash(ex.source()))
			if ex.Lib != "" {
				funcs, _ = declared(t, src)
			}
			if ex.Page != "" && !strings.HasSuffix(ex.Page, ".md") {
				t.Errorf("page %q is not a Markdown file", ex.Page)
			}
			switch ex.Kind {
			case Build:
				if len(ex.Funcs) == 0 || ex.Edit != nil {
					t.Errorf("a build exercise lists functions and no edit")
				}
				for _, name := range ex.Funcs {
					if !funcs[name] {
						t.Errorf("function %s is not declared in %s", name, ex.source())
					}
				}
			case Break:
				if ex.Edit == nil || len(ex.Funcs) != 0 {
					t.Fatalf("a break exercise has an edit and no functions")
				}
				data, err := os.ReadFile(filepath.Join(src, ex.Edit.File))
				if err != nil {
					t.Fatal(err)
				}
				if n := strings.Count(string(data), ex.Edit.Old); ex.Edit.Old == "" || n != 1 {
					t.Errorf("edit: %q occurs %d times in %s, want once", ex.Edit.Old, n, ex.Edit.File)
				}
				if ex.Edit.Old == ex.Edit.New {
					t.Errorf("edit changes nothing")
				}
			default:
				t.Errorf("kind %q is neither build nor break", ex.Kind)
			}
		})
	}
}

// Every exercise's copy must compile, tests included; otherwise `check` fails for the wrong
// reason. The applied files are laid over the step with -overlay, so nothing is written into
// the repository.
func TestExerciseCopiesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet on every exercise copy")
	}
	root := testRoot(t)
	for _, ex := range exercises {
		t.Run(ex.ID, func(t *testing.T) {
			tmp := t.TempDir()
			copyDir := filepath.Join(tmp, "copy")
			if _, err := prepare(root, ex, copyDir); err != nil {
				t.Fatal(err)
			}
			if ex.Lib != "" {
				// The copy brings its own overlay: vet the library through it, and the step that
				// the check runs with it.
				vet := exec.Command("go", "vet", "-overlay", filepath.Join(copyDir, overlayFile), "./"+ex.Lib, "./"+ex.testDir())
				vet.Dir = root
				if msg, err := vet.CombinedOutput(); err != nil {
					t.Errorf("go vet of the copy of exercise %s: %v\n%s", ex.ID, err, msg)
				}
				return
			}
			stepDir := filepath.Join(root, "steps", ex.Step)
			files, err := filepath.Glob(filepath.Join(copyDir, "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			overlay := map[string]map[string]string{"Replace": {}}
			for _, f := range files {
				overlay["Replace"][filepath.Join(stepDir, filepath.Base(f))] = f
			}
			data, err := json.Marshal(overlay)
			if err != nil {
				t.Fatal(err)
			}
			overlayFile := filepath.Join(tmp, "overlay.json")
			if err := os.WriteFile(overlayFile, data, 0o644); err != nil {
				t.Fatal(err)
			}
			vet := exec.Command("go", "vet", "-overlay", overlayFile, "./steps/"+ex.Step)
			vet.Dir = root
			if msg, err := vet.CombinedOutput(); err != nil {
				t.Errorf("go vet of the copy of exercise %s: %v\n%s", ex.ID, err, msg)
			}
		})
	}
}

// A library exercise's copy holds the library's files without its tests, and an overlay that
// lays each of them over the library; its check runs in the step through that overlay.
func TestLibraryExerciseCopy(t *testing.T) {
	root := testRoot(t)
	ex, ok := lookup("06.4")
	if !ok || ex.Lib == "" {
		t.Fatal("exercise 06.4 is not a library exercise")
	}
	dest := filepath.Join(t.TempDir(), ex.ID)
	if _, err := prepare(root, ex, dest); err != nil {
		t.Fatal(err)
	}
	tests, err := filepath.Glob(filepath.Join(dest, "*_test.go"))
	if err != nil || len(tests) > 0 {
		t.Errorf("the copy holds tests %v (%v)", tests, err)
	}
	data, err := os.ReadFile(filepath.Join(dest, overlayFile))
	if err != nil {
		t.Fatal(err)
	}
	var overlay struct{ Replace map[string]string }
	if err := json.Unmarshal(data, &overlay); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(root, filepath.FromSlash(ex.Lib), "reconnect.go")
	if got := overlay.Replace[lib]; got != filepath.Join(dest, "reconnect.go") {
		t.Errorf("overlay maps %s to %q", lib, got)
	}
	for from, to := range overlay.Replace {
		if filepath.Dir(from) != filepath.Dir(lib) || filepath.Dir(to) != dest || filepath.Base(from) != filepath.Base(to) {
			t.Errorf("overlay entry %s -> %s", from, to)
		}
	}
	want := []string{"-overlay", filepath.Join(dest, overlayFile), "./steps/" + ex.Step}
	if got := testTarget(root, ex, dest); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("testTarget = %q, want %q", got, want)
	}
}
