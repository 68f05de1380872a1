// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepositoryIsKnown fails while a final/ function and its step counterpart differ in a way
// known.txt does not describe: a fix made on one side and not looked at on the other.
func TestRepositoryIsKnown(t *testing.T) {
	out, ok, err := report("../..", true, false)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("make stepsame finds code that may have missed a fix:\n%s", out)
	}
}

// TestAFixOnOneSideIsNamed edits a copy of a step function known.txt lists, and of one that
// matched final/'s exactly: both must be named.
func TestAFixOnOneSideIsNamed(t *testing.T) {
	root := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("final/shim/process/a.go", "package process\n\nfunc Same() int { return 1 }\n\nfunc Apart() int { return 2 }\n")
	write("steps/01-a/a.go", "package main\n\nfunc same() int { return 1 }\n\nfunc apart() int { return 3 }\n")
	write("tools/stepsame/known.txt", "")
	out, ok, err := report(root, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if ok || !strings.Contains(out, "new: final/shim/process/a.go Apart") || strings.Contains(out, " Same ") {
		t.Fatalf("a difference not in known.txt: ok %v\n%s", ok, out)
	}
	// -update listed it without a reason: still not accepted.
	if _, ok, _ := report(root, true, false); ok {
		t.Fatal("a pair with no reason passed")
	}
	known, _ := os.ReadFile(filepath.Join(root, "tools/stepsame/known.txt"))
	write("tools/stepsame/known.txt", string(known)+"\tThe step counts differently.\n")
	if out, ok, _ := report(root, true, false); !ok {
		t.Fatalf("a known pair with its reason:\n%s", out)
	}
	// A fix to the step's copy of a known pair, and one to a copy that matched: both named.
	write("steps/01-a/a.go", "package main\n\nfunc same() int { return 4 }\n\nfunc apart() int { return 5 }\n")
	out, ok, _ = report(root, true, false)
	if ok || !strings.Contains(out, "changed: final/shim/process/a.go Apart") || !strings.Contains(out, "new: final/shim/process/a.go Same") {
		t.Fatalf("edits on one side:\n%s", out)
	}
}
