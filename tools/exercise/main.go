// SPDX-License-Identifier: Apache-2.0

// Command exercise prepares and checks the workshop exercises (docs/workshop.md).
// It runs from anywhere in the repository: `make exercise`, `make check` and `make exercises`
// call it as go run ./tools/exercise list | make EX | check EX | verify [EX...].
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

const usage = "usage: exercise list | make EX | check EX | verify [EX...]"

// usageError is a mistake in what the caller asked for, as opposed to a failure while doing it.
type usageError string

func (e usageError) Error() string { return string(e) }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	code, err := dispatch(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "exercise:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return code
}

// dispatch returns the exit code of a command that ran, or the error that kept it from running.
func dispatch(args []string) (int, error) {
	if len(args) == 0 {
		return 0, usageError(usage)
	}
	cmd, rest := args[0], args[1:]
	want := map[string]int{"list": 0, "make": 1, "check": 1, "verify": -1} // -1: any number
	n, known := want[cmd]
	switch {
	case !known:
		return 0, usageError(fmt.Sprintf("unknown command %q; %s", cmd, usage))
	case n >= 0 && len(rest) != n:
		return 0, usageError(fmt.Sprintf("%s takes %d exercise id(s); %s", cmd, n, usage))
	}
	var exs []Exercise
	for _, id := range rest {
		ex, ok := lookup(id)
		if !ok {
			return 0, usageError(fmt.Sprintf("unknown exercise %q (make exercise-list shows them)", id))
		}
		exs = append(exs, ex)
	}
	root, err := repoRoot()
	if err != nil {
		return 0, err
	}
	switch cmd {
	case "list":
		return 0, list(os.Stdout)
	case "make":
		return 0, makeExercise(root, exs[0])
	case "check":
		return check(root, exs[0])
	default:
		if len(exs) == 0 {
			exs = exercises
		}
		return verify(root, exs, os.Stdout)
	}
}

// repoRoot is the directory holding go.mod, found upwards from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory; run from the repository")
		}
		dir = parent
	}
}

func list(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTEP\tKIND\tTITLE\tCHECK")
	for _, ex := range exercises {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ex.ID, ex.Step, ex.Kind, ex.Title, ex.Check)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write list: %w", err)
	}
	return nil
}

// workDir is where `make` puts an exercise's copy. Its base name starts with the step number and
// a dot, which is how testkit.Binary knows which shim the copy builds.
func workDir(root string, ex Exercise) string {
	return filepath.Join(root, "work", ex.ID)
}

func makeExercise(root string, ex Exercise) error {
	dest := workDir(root, ex)
	_, err := os.Stat(dest)
	replaced := err == nil
	did, err := prepare(root, ex, dest)
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(root, dest)
	if replaced {
		fmt.Printf("replaced the earlier %s\n", rel)
	}
	fmt.Printf("%s: %s with %s\n\n", rel, ex.source(), did)
	fmt.Printf("Exercise %s (%s): %s\n", ex.ID, ex.Kind, ex.Title)
	fmt.Printf("Hint: %s\n", ex.Hint)
	fmt.Printf("Read: %s#%s\n\n", ex.page(), ex.Anchor)
	if ex.Lib != "" {
		fmt.Printf("make check runs the tests of %s with %s in place of %s.\n", ex.testDir(), rel, ex.Lib)
	}
	if ex.Kind == Build {
		fmt.Printf("Fill in the stubs in %s, then run:  make check EX=%s\n", rel, ex.ID)
	} else {
		fmt.Printf("Predict what %s will report, then run:  make check EX=%s\n", ex.Check, ex.ID)
	}
	return nil
}

// prepare makes dest a copy of the exercise's step or library (its files, not its
// subdirectories) with the exercise applied, replacing whatever dest held. It says what it
// changed.
func prepare(root string, ex Exercise, dest string) (string, error) {
	src := filepath.Join(root, filepath.FromSlash(ex.source()))
	if err := copyFiles(src, dest, ex.Lib == ""); err != nil {
		return "", err
	}
	switch ex.Kind {
	case Build:
		did, err := stubDir(dest, src, ex)
		if err != nil || ex.Lib == "" {
			return did, err
		}
		if err := writeOverlay(src, dest); err != nil {
			return "", fmt.Errorf("exercise %s: %w", ex.ID, err)
		}
		return did, nil
	case Break:
		if ex.Lib != "" {
			if err := writeOverlay(src, dest); err != nil {
				return "", fmt.Errorf("exercise %s: %w", ex.ID, err)
			}
		}
		if ex.Edit == nil {
			return "", fmt.Errorf("exercise %s: a break exercise needs an Edit", ex.ID)
		}
		file := filepath.Join(dest, ex.Edit.File)
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("exercise %s: %w", ex.ID, err)
		}
		data, err = applyEdit(data, *ex.Edit)
		if err != nil {
			return "", fmt.Errorf("exercise %s: %w", ex.ID, err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return "", fmt.Errorf("exercise %s: %w", ex.ID, err)
		}
		return fmt.Sprintf("%q replaced by %q in %s", ex.Edit.Old, ex.Edit.New, ex.Edit.File), nil
	}
	return "", fmt.Errorf("exercise %s: unknown kind %q", ex.ID, ex.Kind)
}

// overlayFile is the go build -overlay file that a library exercise's copy holds: it lays the
// copy's Go files over the library's.
const overlayFile = "overlay.json"

// writeOverlay writes dest/overlay.json, replacing each Go file of the library in src by its
// copy in dest.
func writeOverlay(src, dest string) error {
	files, err := filepath.Glob(filepath.Join(dest, "*.go"))
	if err != nil {
		return fmt.Errorf("list copy: %w", err)
	}
	replace := map[string]string{}
	for _, f := range files {
		replace[filepath.Join(src, filepath.Base(f))] = f
	}
	data, err := json.MarshalIndent(map[string]map[string]string{"Replace": replace}, "", "\t")
	if err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dest, overlayFile), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
}

// copyFiles copies the regular files of src into a fresh dest. Without withTests it leaves the
// _test.go files out: a library's tests are not what its exercise checks.
func copyFiles(src, dest string, withTests bool) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read step: %w", err)
	}
	if err := os.RemoveAll(dest); err != nil {
		return fmt.Errorf("remove old copy: %w", err)
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("create copy: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || (!withTests && strings.HasSuffix(e.Name(), "_test.go")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return fmt.Errorf("copy step: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dest, e.Name()), data, 0o644); err != nil {
			return fmt.Errorf("copy step: %w", err)
		}
	}
	return nil
}

// stubDir stubs the exercise's functions wherever the copy's non-test files declare them; a
// function with build-tagged variants is stubbed in each. Package names are looked up from the
// step, which is inside the module wherever the copy is.
func stubDir(dir, stepDir string, ex Exercise) (string, error) {
	names := func(_ string, paths []string) (map[string]string, error) { return goListNames(stepDir, paths) }
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", fmt.Errorf("list copy: %w", err)
	}
	message := func(name string) string {
		return fmt.Sprintf("exercise %s: implement %s; see %s#%s", ex.ID, name, ex.page(), ex.Anchor)
	}
	found := map[string]bool{}
	var report []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("exercise %s: %w", ex.ID, err)
		}
		out, stubbed, dropped, err := stubFile(file, src, ex.Funcs, message, names)
		if err != nil {
			return "", fmt.Errorf("exercise %s: stub %s: %w", ex.ID, filepath.Base(file), err)
		}
		if len(stubbed) == 0 {
			continue
		}
		if err := os.WriteFile(file, out, 0o644); err != nil {
			return "", fmt.Errorf("exercise %s: %w", ex.ID, err)
		}
		for _, s := range stubbed {
			found[s] = true
		}
		line := fmt.Sprintf("%s stubbed in %s", strings.Join(stubbed, ", "), filepath.Base(file))
		if len(dropped) > 0 {
			line += fmt.Sprintf(" (imports no longer used: %s)", strings.Join(dropped, ", "))
		}
		report = append(report, line)
	}
	for _, name := range ex.Funcs {
		if !found[name] {
			return "", fmt.Errorf("exercise %s: function %s not found in %s", ex.ID, name, ex.source())
		}
	}
	return strings.Join(report, "; "), nil
}

// testTarget is the end of the go test command line that runs an exercise's check against its
// copy in dir: the copy itself, or, for a library exercise, the package of its tests with the
// copy laid over the library.
func testTarget(root string, ex Exercise, dir string) []string {
	if ex.Lib != "" {
		return []string{"-overlay", filepath.Join(dir, overlayFile), "./" + ex.testDir()}
	}
	rel, _ := filepath.Rel(root, dir)
	return []string{"./" + filepath.ToSlash(rel)}
}

// testEnv is what the go test of an exercise's check adds to the environment. A library
// exercise's overlay also goes in GOFLAGS: tests that build a binary of the library's users
// (shimtest builds the final shim with go build) must build the learner's version too.
func testEnv(ex Exercise, dir string) []string {
	if ex.Lib == "" {
		return nil
	}
	return []string{"GOFLAGS=-overlay=" + filepath.Join(dir, overlayFile)}
}

// check runs the exercise's test against its copy and exits as go test does.
func check(root string, ex Exercise) (int, error) {
	dir := workDir(root, ex)
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("no copy of exercise %s (%w); make exercise EX=%s creates it", ex.ID, err, ex.ID)
	}
	cmd := exec.Command("go", append([]string{"test", "-count=1", "-run", "^" + ex.Check + "$"}, testTarget(root, ex, dir)...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), testEnv(ex, dir)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	fmt.Fprintln(os.Stderr, strings.Join(cmd.Args, " "))
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.ExitCode() < 0 { // killed by a signal
			return 1, nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("run go test: %w", err)
	}
	return 0, nil
}
