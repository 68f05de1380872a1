// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The checker run on the fixture repository in testdata/repo: docs/fresh.md holds blocks as the
// generator makes them, docs/stale.md the same markers gone stale, and worse.

const fixture = "testdata/repo"

// fixtureCopy is a copy of the fixture repository that a test may rewrite.
func fixtureCopy(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(fixture, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fixture, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// fixturePage reads a page of root, failing on a problem of its markers.
func fixturePage(t *testing.T, root, rel string) *page {
	t.Helper()
	p, probs := readPage(root, rel)
	if p == nil || len(probs) > 0 {
		t.Fatalf("read %s: %v", rel, probs)
	}
	return p
}

// expect fails t unless probs are exactly one problem for each want, in order, each holding
// its want ("docs/stale.md:4: ..." and the like).
func expect(t *testing.T, what string, probs []problem, want ...string) {
	t.Helper()
	if len(probs) != len(want) {
		t.Errorf("%s: %d problems, want %d:\n%v", what, len(probs), len(want), probs)
		return
	}
	for i, p := range probs {
		if !strings.Contains(p.String(), want[i]) {
			t.Errorf("%s: problem %d is %q, want it to hold %q", what, i, p.String(), want[i])
		}
	}
}

func TestCheckerPassesFreshBlocks(t *testing.T) {
	p := fixturePage(t, fixture, "docs/fresh.md")
	changed, probs := checkSnippets(fixture, p, false)
	expect(t, "snippets", probs)
	if changed {
		t.Error("checking changed the page")
	}
	_, probs = applyOutputs(p, runOutputs(t, fixture, p), false)
	expect(t, "output", probs)
	_, probs = checkDiagramBlocks(fixture, p, false)
	expect(t, "diagrams", probs)
	ids, err := exerciseIDs(fixture)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "exercises", checkExerciseIDs(p, ids))
	expect(t, "links", checkLinks(fixture, p))
	expect(t, "unmarked output", checkUnmarked(p))
}

func TestCheckerFailsStaleBlocks(t *testing.T) {
	p, probs := readPage(fixture, "docs/stale.md")
	expect(t, "markers", probs, "docs/stale.md:45: <!-- output: true -->: not followed by a fenced code block")
	_, probs = checkSnippets(fixture, p, false)
	expect(t, "snippets", probs,
		"docs/stale.md:3: <!-- snippet: src/sample.go counter.Add -->: the block differs from the source",
		"docs/stale.md:12: <!-- snippet: src/sample.go gone -->: gone is not declared in src/sample.go")
	_, probs = applyOutputs(p, runOutputs(t, fixture, p), false)
	expect(t, "output", probs, "docs/stale.md:16: <!-- output: printf 'pid 4321 took 12.5ms\\n' -->: the block differs")
	_, probs = checkDiagramBlocks(fixture, p, false)
	expect(t, "diagrams", probs,
		"docs/stale.md:21: <!-- diagram: 05-wait-events -->: the block is not docs/diagrams/05-wait-events.mmd",
		"docs/stale.md:26: <!-- diagram: 99-nothing -->: no scenario draws")
	ids, err := exerciseIDs(fixture)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "exercises", checkExerciseIDs(p, ids), "docs/stale.md:43: exercise 09.9 is not in tools/exercise/exercises.go")
	expect(t, "links", checkLinks(fixture, p),
		"docs/stale.md:43: link ../src/missing.go: no such file",
		"docs/stale.md:43: link fresh.md#nowhere: docs/fresh.md has no heading with the anchor #nowhere")
	expect(t, "unmarked output", checkUnmarked(p),
		"docs/stale.md:30: <!-- illustrative -->: the prose around the block must say",
		"docs/stale.md:38: a block shows a command's output")
}

func TestUpdateRewritesStaleBlocks(t *testing.T) {
	root := fixtureCopy(t)
	p, _ := readPage(root, "docs/stale.md") // the marker without a block is tested above
	c1, _ := checkSnippets(root, p, true)
	c2, _ := applyOutputs(p, runOutputs(t, root, p), true)
	c3, _ := checkDiagramBlocks(root, p, true)
	if !c1 || !c2 || !c3 {
		t.Fatalf("update changed snippets %v, output %v, diagrams %v; want all", c1, c2, c3)
	}
	if err := p.write(); err != nil {
		t.Fatal(err)
	}
	p, _ = readPage(root, "docs/stale.md")
	_, probs := checkSnippets(root, p, false)
	// The name that is gone cannot be updated away.
	expect(t, "snippets after update", probs, "gone is not declared")
	_, probs = applyOutputs(p, runOutputs(t, root, p), false)
	expect(t, "output after update", probs)
	_, probs = checkDiagramBlocks(root, p, false)
	expect(t, "diagrams after update", probs, "99-nothing")
	fresh := fixturePage(t, root, "docs/fresh.md")
	if got, want := p.content(p.blocks[0]), fresh.content(fresh.blocks[0]); got != want {
		t.Errorf("updated snippet:\n%s\nwant\n%s", got, want)
	}
}

func TestSnippetFollowsTheSource(t *testing.T) {
	root := fixtureCopy(t)
	src := filepath.Join(root, "src", "sample.go")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(strings.Replace(string(data), "c.n += d", "c.n += d // counted", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, probs := checkSnippets(root, fixturePage(t, root, "docs/fresh.md"), false)
	expect(t, "snippets after the source changed", probs, "docs/fresh.md:5: <!-- snippet: src/sample.go counter.Add -->: the block differs")
}

func TestExtract(t *testing.T) {
	for _, tc := range []struct{ name, want, err string }{
		{name: "twice", want: "// twice is d added twice.\nfunc twice(d int) int {"},
		{name: "counter.Add", want: "// Add adds d; a negative d is refused.\nfunc (c *counter) Add"},
		{name: "counter", want: "// counter counts what it is told to.\ntype counter struct{ n int }\n"},
		{name: "limit", want: "\t// limit is the largest count.\n\tlimit = 10\n"},
		{name: "other", want: "\tother = 2\n"},
		{name: "Add", err: "Add is not declared"},
		{name: "counter.Sub", err: "counter.Sub is not declared"},
	} {
		got, err := extract(fixture, "src/sample.go", tc.name)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("extract %s: %v, want an error with %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || !strings.HasPrefix(got, tc.want)):
			t.Errorf("extract %s = %q, %v; want it to begin %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := extract(fixture, "../go.mod", "x"); err == nil {
		t.Error("a path out of the repository was read")
	}
}

func TestMask(t *testing.T) {
	in := `shim for demo listens at unix:///tmp/sw123456/t98765432/s/0123abcd (pid 4242)
state /tmp/shimctl-2837461823/state, task demo-1a2b3c, id 0123456789abcdef0123
{"pid":77,"time":"2026-11-29T12:10:26.147803924Z"} exit status 3 at 12:10:26 after 1.5s, 350µs, 2m3.5s
words stay: deface, 123456 bytes, uid=0, exit 137, version 2, step 06`
	want := `shim for demo listens at <addr> (pid <pid>)
state <tmp>/state, task demo-<hex>, id <hex>
{"pid":<pid>,"time":"<time>"} exit status 3 at <time> after <dur>, <dur>, <dur>
words stay: deface, 123456 bytes, uid=0, exit 137, version 2, step 06`
	if got := mask(in, ""); got != want {
		t.Errorf("mask:\n%s\nwant\n%s", got, want)
	}
	if got := mask("/work/x/s/y", "/work/x"); got != "<tmp>/s/y" {
		t.Errorf("the sandbox is not masked: %s", got)
	}
}

func TestSameDiagram(t *testing.T) {
	a := `sequenceDiagram
    shimctl->>shim: exec start
    shim-->>shimctl: version 2 at unix:///tmp/sw1234567/s/abc... (8.88ms)
    shimctl->>shim: Start
    shim-)shimctl: event /tasks/start demo
    shim-->>shimctl: OK (3.2ms)
    shimctl->>shim: Shutdown
    shim-->>shimctl: OK (100µs)
`
	reordered := `sequenceDiagram
    shimctl->>shim: exec start
    shim-->>shimctl: version 2 at unix:///tmp/sw7654321/s/def... (9.1ms)
    shimctl->>shim: Start
    shim-->>shimctl: OK (2.9ms)
    shim-)shimctl: event /tasks/start demo
    shimctl->>shim: Shutdown
    shim-->>shimctl: OK (5µs)
`
	if !sameDiagram(a, reordered) {
		t.Errorf("diagrams that differ in values and event order differ:\n%s\n%s",
			diagramKey(mask(a, "")), diagramKey(mask(reordered, "")))
	}
	for _, other := range []string{
		strings.Replace(a, "OK (3.2ms)", "Unimplemented: Start (3.2ms)", 1),
		strings.Replace(a, "    shim-)shimctl: event /tasks/start demo\n", "", 1),
		strings.Replace(a, "exec start", "exec delete", 1),
		// A Shutdown whose reply was cut is an RPC error, not the same run: the shim must answer.
		strings.Replace(a, "OK (100µs)", "Unknown: ttrpc: closed (100µs)", 1),
	} {
		if sameDiagram(a, other) {
			t.Errorf("a different diagram is the same:\n%s", other)
		}
	}
}

// TestSameDiagramLetsTheShimRunBeside: the long-lived shim's own notes fall where its scheduling
// puts them, as events do; the start helper's steps happen inside the exec, in order.
func TestSameDiagramLetsTheShimRunBeside(t *testing.T) {
	a := `sequenceDiagram
    shimctl->>helper: exec start
    Note over helper: binds the socket (0600)
    helper->>shim: re-exec: listener as fd 3, no stdio, Setpgid
    Note over helper: writes shim.pid, prints the address, exits
    helper-->>shimctl: version 2 at unix:///tmp/sw1234567/s/abc... (8.88ms)
    Note over shim: serves the listener it found as fd 3
    shimctl->>shim: Start
    reaper-)shim: SIGCHLD, wait4: not a runc command, exited 3, to the service
    reaper->>shim: SIGCHLD, wait4: a runc command exited 0, to its caller
    shim-->>shimctl: OK (3.2ms)
`
	moved := strings.Replace(a, "    Note over shim: serves the listener it found as fd 3\n", "", 1)
	moved = strings.Replace(moved, "    Note over helper: writes", "    Note over shim: serves the listener it found as fd 3\n    Note over helper: writes", 1)
	if !sameDiagram(a, moved) {
		t.Errorf("the shim's note moved makes another diagram:\n%s", moved)
	}
	for _, other := range []string{
		// The helper's steps are ordered: printing the address before binding the socket is a bug.
		strings.Replace(strings.Replace(a, "    Note over helper: binds the socket (0600)\n", "", 1),
			"helper-->>shimctl", "Note over helper: binds the socket (0600)\n    helper-->>shimctl", 1),
		strings.Replace(a, "    Note over shim: serves the listener it found as fd 3\n", "", 1),
		strings.Replace(a, "a runc command exited 0", "a runc command exited 1", 1),
	} {
		if sameDiagram(a, other) {
			t.Errorf("a different diagram is the same:\n%s", other)
		}
	}
}

func TestDiffsAndRegions(t *testing.T) {
	root := fixtureCopy(t)
	expect(t, "before update", checkDiffs(root, false),
		"docs/diffs/01-first.diff:0: missing",
		"steps/01-first/README.md:0: <!-- file-changes:begin -->: has no file-changes region",
		"docs/diffs/02-second.diff:0: missing",
		"steps/02-second/README.md:5: <!-- file-changes:begin -->: the file-changes region is stale")
	expect(t, "update", checkDiffs(root, true))
	expect(t, "after update", checkDiffs(root, false))

	diff, err := os.ReadFile(filepath.Join(root, "docs", "diffs", "02-second.diff"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"diff -u steps/01-first/x.go steps/02-second/x.go\n--- steps/01-first/x.go\n+++ steps/02-second/x.go\n",
		"-import \"github.com/containerd/ttrpc\"\n+import \"golang.org/x/sys/unix\"\n",
		"diff -u /dev/null steps/02-second/y.go\n",
	} {
		if !strings.Contains(string(diff), want) {
			t.Errorf("02-second.diff lacks %q:\n%s", want, diff)
		}
	}
	if strings.Contains(string(diff), "README") {
		t.Errorf("the diff covers the README:\n%s", diff)
	}
	readme, err := os.ReadFile(filepath.Join(root, "steps", "02-second", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| [`x.go`](x.go) | modified | +2 −2 |",
		"| [`y.go`](y.go) | added | +3 |",
		"the step starts using `golang.org/x/sys`; it stops using `github.com/containerd/ttrpc`.",
		"<!-- file-changes:end -->\n\n## After the region\n",
	} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("02-second's README lacks %q:\n%s", want, readme)
		}
	}

	// A change to a step makes the diff stale again.
	if err := os.WriteFile(filepath.Join(root, "steps", "02-second", "y.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(t, "after a change", checkDiffs(root, false),
		"docs/diffs/02-second.diff:1: stale",
		"steps/02-second/README.md:5: <!-- file-changes:begin -->: the file-changes region is stale")
}
