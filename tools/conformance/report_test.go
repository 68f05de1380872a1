// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// stream writes test2json events for tests given as name=action ("run" for one never ended).
func stream(tests ...string) string {
	var b strings.Builder
	b.WriteString(`{"Action":"start","Package":"integration/client"}` + "\n")
	b.WriteString("not json: test2json passes the suite's stray lines on as output events, but a file may hold others\n")
	for _, t := range tests {
		name, action, _ := strings.Cut(t, "=")
		fmt.Fprintf(&b, `{"Action":"run","Test":%q}`+"\n", name)
		fmt.Fprintf(&b, `{"Action":"output","Test":%q,"Output":"    x_test.go:1: %s says %s\n"}`+"\n", name, name, action)
		fmt.Fprintf(&b, `{"Action":"output","Test":%q,"Output":"    log_hook.go:47: level=debug msg=noise\n"}`+"\n", name)
		if action != "run" {
			fmt.Fprintf(&b, `{"Action":%q,"Test":%q}`+"\n", action, name)
		}
	}
	b.WriteString(`{"Action":"fail","Package":"integration/client"}` + "\n")
	return b.String()
}

func mustRead(t *testing.T, s string) map[string]*outcome {
	t.Helper()
	res, err := readResults(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestRegressionsArePassWithReferenceOnly(t *testing.T) {
	ref := mustRead(t, stream("TestA=pass", "TestB=pass", "TestC=fail", "TestD=pass", "TestE=pass", "TestF=skip", "TestG=pass", "TestG/sub=pass"))
	final := mustRead(t, stream("TestA=pass", "TestB=fail", "TestC=pass", "TestD=skip", "TestF=fail", "TestG=run", "TestG/sub=pass"))
	// TestE never ran with the final shim, TestG started and never ended (the run died).
	want := []string{"TestB", "TestD", "TestE", "TestG"}
	if got := regressions(ref, final); !slices.Equal(got, want) {
		t.Fatalf("regressions %v, want %v", got, want)
	}
	tbl := table(ref, final)
	for _, row := range []string{"| TestB | pass | **fail** |", "| TestC | fail | pass |", "| TestE | pass | **not run** |",
		"| TestG | pass | **unfinished** |", "| TestF | skip | fail |", "| TestG/sub | pass | pass |"} {
		if !strings.Contains(tbl, row+"\n") {
			t.Errorf("table lacks %q:\n%s", row, tbl)
		}
	}
	if !strings.HasPrefix(tbl, "containerd-shim-runc-v2: 6 pass, 1 fail, 0 hung, 1 skip. Final shim: 3 pass, 2 fail, 0 hung, 1 skip, 1 not run. Passing with the reference and not with the final shim: 4.") {
		t.Errorf("summary: %s", tbl)
	}
	f := failures(ref, final, 5)
	if !strings.Contains(f, "### TestB\n\n```\n    x_test.go:1: TestB says fail\n```") || strings.Contains(f, "log_hook") {
		t.Errorf("failures:\n%s", f)
	}
	if !strings.Contains(f, "### TestE\n\n```\n(the final shim's run has no such test)\n```") {
		t.Errorf("failures of a test the final run lacks:\n%s", f)
	}
	if regressions(ref, ref) != nil {
		t.Error("a run compared with itself has regressions")
	}
}

func TestTrimmedKeepsTheMessageAndTheVerdict(t *testing.T) {
	o := &outcome{Action: "fail", Output: []string{"=== RUN   TestX", "setup noise", "    x_test.go:9: it broke:", "", "a",
		"    log_hook.go:47: noise", "b", "c", "--- FAIL: TestX (0.00s)"}}
	got := trimmed(o, 3)
	want := []string{"    x_test.go:9: it broke:", "a", "b", "(1 more lines left out)", "--- FAIL: TestX (0.00s)"}
	if !slices.Equal(got, want) {
		t.Fatalf("trimmed %q, want %q", got, want)
	}
	long := &outcome{Output: []string{strings.Repeat("x", 2*maxLine)}}
	if got := trimmed(long, 3); len(got) != 1 || len(got[0]) > maxLine+len(" …") {
		t.Fatalf("a long line is kept whole: %d bytes", len(got[0]))
	}
}

func TestReadResultsRejectsBrokenEvents(t *testing.T) {
	if _, err := readResults(strings.NewReader(`{"Action":"pass","Test":` + "\n")); err == nil {
		t.Fatal("a cut-off event was accepted")
	}
}

func TestReplaceSection(t *testing.T) {
	doc := "# Doc\n\ntext\n\n" + beginMarker + "\nold table\n" + endMarker + "\n\nmore\n"
	got, err := replaceSection(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Doc\n\ntext\n\n" + beginMarker + "\nnew table\n" + endMarker + "\n\nmore\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	again, err := replaceSection(got, "new table\n")
	if err != nil || again != got {
		t.Fatalf("a second replacement changed the document: %q, %v", again, err)
	}
	for _, bad := range []string{"no markers", endMarker + beginMarker, beginMarker + beginMarker + endMarker, beginMarker + endMarker + endMarker} {
		if _, err := replaceSection(bad, "x"); err == nil {
			t.Errorf("replaceSection(%q) accepted it", bad)
		}
	}
}

func TestHungTestsAreSkippedOnTheNextStart(t *testing.T) {
	tr := &tracker{state: map[string]string{}}
	for _, l := range strings.Split(strings.TrimSpace(stream("TestA=pass", "TestB/sub=run", "TestB=run", "TestC=skip")), "\n") {
		tr.see([]byte(l))
	}
	tr.see([]byte(`{"Action":"pause","Test":"TestD"}`))
	st := tr.result(true)
	if !slices.Equal(st.hung, []string{"TestB", "TestB/sub"}) {
		t.Errorf("hung %v", st.hung)
	}
	if len(st.done) != 2 {
		t.Errorf("done %v", st.done)
	}
	if st := tr.result(false); st.hung != nil {
		t.Errorf("a run that ended by itself has hung tests %v", st.hung)
	}
	skip := map[string]bool{}
	for _, n := range append(st.done, st.hung...) {
		skip[topLevel(n)] = true
	}
	if got := skipExpr(skip); got != "^(TestA|TestB|TestC)$" {
		t.Errorf("skip expression %q", got)
	}
	ref := mustRead(t, stream("TestB=pass"))
	final := mustRead(t, `{"Action":"output","Test":"TestB","Output":"stopped\n"}`+"\n"+`{"Action":"hung","Test":"TestB"}`+"\n")
	if !strings.Contains(table(ref, final), "| TestB | pass | **hung** |") {
		t.Errorf("table:\n%s", table(ref, final))
	}
}

func TestPartialRunsCompareWhatBothRan(t *testing.T) {
	ref := mustRead(t, stream("TestA=pass", "TestB=pass"))
	final := mustRead(t, stream("TestB=fail"))
	r, f := both(ref, final)
	if got := regressions(r, f); !slices.Equal(got, []string{"TestB"}) {
		t.Fatalf("regressions %v, want TestB alone", got)
	}
}
