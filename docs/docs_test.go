// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"flag"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

var update = flag.Bool("update", false, "rewrite what is generated instead of checking it")

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// report fails t with every problem, one a line.
func report(t *testing.T, probs []problem) {
	t.Helper()
	for _, p := range probs {
		t.Error(p.String())
	}
}

// eachPage reads every page checked, runs fn on it, and with -update writes back a page fn
// changed.
func eachPage(t *testing.T, fn func(p *page) (bool, []problem)) {
	t.Helper()
	root := testkit.RepoRoot(t)
	rels, err := pages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range rels {
		p, probs := readPage(root, rel)
		report(t, probs)
		if p == nil {
			continue
		}
		changed, probs := fn(p)
		report(t, probs)
		if changed && *update {
			if err := p.write(); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote %s", rel)
		}
	}
}

func TestSnippets(t *testing.T) {
	root := testkit.RepoRoot(t)
	eachPage(t, func(p *page) (bool, []problem) { return checkSnippets(root, p, *update) })
}

func TestExerciseIDs(t *testing.T) {
	root := testkit.RepoRoot(t)
	ids, err := exerciseIDs(root)
	if err != nil {
		t.Fatal(err)
	}
	eachPage(t, func(p *page) (bool, []problem) { return false, checkExerciseIDs(p, ids) })
}

func TestLinks(t *testing.T) {
	root := testkit.RepoRoot(t)
	eachPage(t, func(p *page) (bool, []problem) { return false, checkLinks(root, p) })
}

func TestOutputIsAccountedFor(t *testing.T) {
	eachPage(t, func(p *page) (bool, []problem) { return false, checkUnmarked(p) })
}

func TestStepDiffs(t *testing.T) {
	testkit.RequireCommand(t, "diff")
	root := testkit.RepoRoot(t)
	report(t, checkDiffs(root, *update))
}

// buildOnce builds bin/ as `make build` does, once per test process: output and diagrams come
// from the binaries of this tree.
var buildOnce = sync.OnceValues(func() ([]byte, error) {
	cmd := exec.Command("make", "build")
	cmd.Dir = repoRoot
	return cmd.CombinedOutput()
})

var repoRoot string

func build(t *testing.T) string {
	t.Helper()
	testkit.RequireRoot(t)
	testkit.RequireCommand(t, "runc", "busybox", "make")
	repoRoot = testkit.RepoRoot(t)
	if out, err := buildOnce(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	return repoRoot
}

// TestRuns runs the output commands and the diagram scenarios, side by side, then checks the
// blocks of the pages against what they produced.
func TestRuns(t *testing.T) {
	root := build(t)
	var mu sync.Mutex
	outputs := map[string][]outputResult{} // page -> the result of each output block, in order
	failed := map[string][]problem{}
	t.Run("run", func(t *testing.T) {
		t.Run("outputs", func(t *testing.T) {
			t.Parallel()
			rels, err := pages(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, rel := range rels {
				p, _ := readPage(root, rel) // its problems are reported below
				if p == nil {
					continue
				}
				results := runOutputs(t, root, p)
				mu.Lock()
				outputs[rel] = results
				mu.Unlock()
			}
		})
		for name, sc := range scenarios {
			t.Run("diagram/"+name, func(t *testing.T) {
				t.Parallel()
				d, err := draw(t, root, name, sc)
				if err != nil {
					mu.Lock()
					failed[name] = append(failed[name], problem{file: "docs/diagrams/" + name + ".mmd", msg: err.Error()})
					mu.Unlock()
					return
				}
				report(t, writeDiagram(root, name, d, *update))
			})
		}
	})
	for _, probs := range failed {
		report(t, probs)
	}
	eachPage(t, func(p *page) (bool, []problem) {
		results, ran := outputs[p.path]
		if !ran { // -run left the outputs out
			return checkDiagramBlocks(root, p, *update)
		}
		changed, probs := applyOutputs(p, results, *update)
		c2, probs2 := checkDiagramBlocks(root, p, *update)
		return changed || c2, append(probs, probs2...)
	})
}
