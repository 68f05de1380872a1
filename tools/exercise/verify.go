// SPDX-License-Identifier: Apache-2.0

// verify keeps every exercise honest: its README heading exists, its check fails on the stubbed
// or broken copy, and passes on the step. A check that passes both ways teaches nothing; one
// that fails both ways is broken. Outcomes are read per test from go test -json, because a copy
// that does not compile, or a test that skips (not root, say), must not count as either.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/shimwalk/shimwalk/tools/mdanchor"
)

// verifyJobs is how many go test processes run at once. Each runs its tests in parallel and
// starts shims and containerd, so more mostly adds contention.
const verifyJobs = 2

// outcome is what one go test run said about one test.
type outcome struct {
	ok   bool
	note string
}

// testRun is one go test -json invocation of a single package and what it reported.
type testRun struct {
	pkg      string   // "./steps/01-bootstrap"
	args     []string // before pkg: "-overlay FILE" for a library exercise's copy
	env      []string // added to go test's environment
	tests    []string // checks whose outcome is wanted
	result   map[string]string
	buildErr bool
	output   bytes.Buffer // everything the tests printed, shown when something is wrong
	err      error        // go test could not be run or its output not read
	took     time.Duration
}

// run executes go test for r's checks in root, stopping with ctx.
func (r *testRun) run(ctx context.Context, root string) {
	begin := time.Now()
	defer func() { r.took = time.Since(begin) }()
	var tops []string
	for _, t := range r.tests {
		top, _, _ := strings.Cut(t, "/")
		if !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
	}
	// A pattern with a subtest cannot be grouped ("^(A|B/c)$" is applied to top-level names
	// only), so a group runs whole top-level tests and picks the subtests' events out.
	pattern := "^" + r.tests[0] + "$"
	if len(r.tests) > 1 {
		pattern = "^(" + strings.Join(tops, "|") + ")$"
	}
	args := append([]string{"test", "-json", "-count=1", "-run", pattern}, r.args...)
	cmd := exec.CommandContext(ctx, "go", append(args, r.pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), r.env...)
	// On interrupt let go test stop its test binary, whose cleanups stop the shims it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	// Not r.output: exec copies stderr into it from its own goroutine while parse writes to it.
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.err = fmt.Errorf("go test %s: %w", r.pkg, err)
		return
	}
	if err := cmd.Start(); err != nil {
		r.err = fmt.Errorf("go test %s: %w", r.pkg, err)
		return
	}
	r.result = map[string]string{}
	readErr := r.parse(stdout)
	waitErr := cmd.Wait()
	r.output.Write(stderr.Bytes())
	var ee *exec.ExitError
	switch {
	case readErr != nil:
		r.err = fmt.Errorf("read go test %s output: %w", r.pkg, readErr)
	case waitErr != nil && !errors.As(waitErr, &ee):
		r.err = fmt.Errorf("go test %s: %w", r.pkg, waitErr)
	case ctx.Err() != nil:
		r.err = fmt.Errorf("go test %s: %w", r.pkg, ctx.Err())
	}
}

// parse reads go test -json events: a test's last pass/fail/skip is its outcome.
func (r *testRun) parse(stdout io.Reader) error {
	dec := json.NewDecoder(stdout)
	for {
		var ev struct {
			Action, Test, Output, FailedBuild string
		}
		err := dec.Decode(&ev)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			// Not JSON (go test itself failing early): keep the rest as plain output.
			_, _ = io.Copy(&r.output, io.MultiReader(dec.Buffered(), stdout))
			return nil
		}
		switch ev.Action {
		case "output", "build-output":
			r.output.WriteString(ev.Output)
		case "build-fail":
			r.buildErr = true
		case "pass", "fail", "skip":
			if ev.Test != "" {
				r.result[ev.Test] = ev.Action
			}
		}
		if ev.FailedBuild != "" {
			r.buildErr = true
		}
	}
}

// outcome reports whether test ended as want said.
func (r *testRun) outcome(test, want string) outcome {
	got := r.result[test]
	switch {
	case r.err != nil:
		return outcome{false, r.err.Error()}
	case r.buildErr:
		return outcome{false, "does not build"}
	case got == "":
		return outcome{false, test + " did not run"}
	case got == "skip":
		return outcome{false, test + " skipped"}
	case got != want:
		return outcome{false, test + " " + map[string]string{"pass": "passed", "fail": "failed"}[got]}
	}
	return outcome{true, ""}
}

// verifyRow is one exercise's line in the summary.
type verifyRow struct {
	ex               Exercise
	readme, stub, on outcome
}

func verify(root string, exs []Exercise, w io.Writer) (int, error) {
	begin := time.Now()
	// Each exercise once: two copies of one would share a directory.
	var uniq []Exercise
	for _, ex := range exs {
		if !slices.ContainsFunc(uniq, func(u Exercise) bool { return u.ID == ex.ID }) {
			uniq = append(uniq, ex)
		}
	}
	exs = uniq
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The copies' base names are exercise ids, which tell testkit which shim they build.
	base := filepath.Join(root, "work", "verify")
	if err := os.RemoveAll(base); err != nil {
		return 0, fmt.Errorf("remove earlier verify copies: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(base); err != nil {
			fmt.Fprintf(os.Stderr, "exercise: remove %s: %v\n", base, err)
		}
	}()

	rows := make([]verifyRow, len(exs))
	var runs []*testRun
	stubRun := make([]*testRun, len(exs))
	stepRun := map[string]*testRun{}
	for i, ex := range exs {
		rows[i] = verifyRow{ex: ex, readme: checkAnchor(root, ex)}
		dest := filepath.Join(base, ex.ID)
		if _, err := prepare(root, ex, dest); err != nil {
			rows[i].stub = outcome{false, err.Error()}
		} else {
			target := testTarget(root, ex, dest)
			last := len(target) - 1
			stubRun[i] = &testRun{pkg: target[last], args: target[:last], env: testEnv(ex, dest), tests: []string{ex.Check}}
			runs = append(runs, stubRun[i])
		}
		sr := stepRun[ex.testDir()]
		if sr == nil {
			sr = &testRun{pkg: "./" + ex.testDir()}
			stepRun[ex.testDir()] = sr
			runs = append(runs, sr)
		}
		if !slices.Contains(sr.tests, ex.Check) {
			sr.tests = append(sr.tests, ex.Check)
		}
	}

	var mu sync.Mutex // serialises progress lines
	sem := make(chan struct{}, verifyJobs)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				r.err = ctx.Err()
				return
			}
			r.run(ctx, root)
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "ran %s -run %s (%.1fs)\n", strings.Join(append(slices.Clone(r.args), r.pkg), " "), strings.Join(r.tests, ","), r.took.Seconds())
		})
	}
	wg.Wait()

	bad := false
	shown := map[*testRun]bool{}
	report := func(what string, r *testRun) {
		if !shown[r] {
			shown[r] = true
			fmt.Fprintf(w, "\n--- %s (go test %s):\n%s", what, strings.Join(append(slices.Clone(r.args), r.pkg), " "), r.output.String())
		}
	}
	for i := range rows {
		row := &rows[i]
		if r := stubRun[i]; r != nil {
			row.stub = r.outcome(row.ex.Check, "fail")
			if !row.stub.ok {
				report(row.ex.ID+" on its copy", r)
			}
		}
		r := stepRun[row.ex.testDir()]
		row.on = r.outcome(row.ex.Check, "pass")
		if !row.on.ok {
			report(row.ex.ID+" on "+row.ex.testDir(), r)
		}
		bad = bad || !row.readme.ok || !row.stub.ok || !row.on.ok
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCHECK\tREADME HEADING\tFAILS ON COPY\tPASSES ON STEP")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.ex.ID, row.ex.Check, cell(row.readme), cell(row.stub), cell(row.on))
	}
	if err := tw.Flush(); err != nil {
		return 0, fmt.Errorf("write summary: %w", err)
	}
	fmt.Fprintf(w, "verified %d exercise(s) in %.1fs\n", len(exs), time.Since(begin).Seconds())
	if bad {
		return 1, nil
	}
	return 0, nil
}

func cell(o outcome) string {
	if o.ok {
		return "yes"
	}
	return "NO: " + o.note
}

// checkAnchor reports whether the exercise's page (the step's README, as a rule) has its heading.
func checkAnchor(root string, ex Exercise) outcome {
	readme := filepath.FromSlash(ex.page())
	data, err := os.ReadFile(filepath.Join(root, readme))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return outcome{false, readme + " does not exist"}
		}
		return outcome{false, err.Error()}
	}
	anchors, err := mdanchor.Anchors(data)
	if err != nil {
		return outcome{false, fmt.Sprintf("%s: %v", readme, err)}
	}
	if !anchors[ex.Anchor] {
		return outcome{false, fmt.Sprintf("no heading #%s in %s", ex.Anchor, readme)}
	}
	return outcome{true, ""}
}
