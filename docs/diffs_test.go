// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	regionBegin = "<!-- file-changes:begin -->"
	regionEnd   = "<!-- file-changes:end -->"
)

// steps lists the step directories under steps/, in order.
func steps(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "steps"))
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() && len(n) > 3 && n[2] == '-' && n[0] >= '0' && n[0] <= '9' && n[1] >= '0' && n[1] <= '9' {
			dirs = append(dirs, n)
		}
	}
	slices.Sort(dirs)
	return dirs, nil
}

// stepFiles lists the files a step's delta covers: all but its README, which is prose about
// its own step.
func stepFiles(root, step string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "steps", step))
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "README.md" {
			files = append(files, e.Name())
		}
	}
	return files, nil
}

// fileChange is one file of a step's delta.
type fileChange struct {
	name        string
	change      string // added, modified, removed
	plus, minus int
	unifiedDiff []byte
	// oldLabel and newLabel name the two sides, /dev/null for none.
	oldLabel, newLabel string
}

// delta is the diff of step against prev ("" for none), file by file, in name order.
func delta(root, prev, step string) ([]fileChange, error) {
	now, err := stepFiles(root, step)
	if err != nil {
		return nil, err
	}
	var before []string
	if prev != "" {
		if before, err = stepFiles(root, prev); err != nil {
			return nil, err
		}
	}
	names := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(before), now...))))
	var changes []fileChange
	for _, n := range names {
		oldPath, newPath := "/dev/null", "/dev/null"
		oldLabel, newLabel := "/dev/null", "/dev/null"
		if slices.Contains(before, n) {
			oldPath, oldLabel = filepath.Join(root, "steps", prev, n), "steps/"+prev+"/"+n
		}
		if slices.Contains(now, n) {
			newPath, newLabel = filepath.Join(root, "steps", step, n), "steps/"+step+"/"+n
		}
		out, err := unified(oldPath, newPath, oldLabel, newLabel)
		if err != nil {
			return nil, err
		}
		if len(out) == 0 {
			continue
		}
		c := fileChange{name: n, change: "modified", unifiedDiff: out, oldLabel: oldLabel, newLabel: newLabel}
		switch {
		case oldLabel == "/dev/null":
			c.change = "added"
		case newLabel == "/dev/null":
			c.change = "removed"
		}
		body := out[bytes.Index(out, []byte("\n@@"))+1:]
		for _, l := range strings.Split(string(body), "\n") {
			switch {
			case strings.HasPrefix(l, "+"):
				c.plus++
			case strings.HasPrefix(l, "-"):
				c.minus++
			}
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// unified is `diff -u` of two files under the labels given, empty when they are the same.
func unified(oldPath, newPath, oldLabel, newLabel string) ([]byte, error) {
	cmd := exec.Command("diff", "-u", "--label", oldLabel, "--label", newLabel, oldPath, newPath)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		err = nil // the files differ
	}
	if err != nil {
		return nil, fmt.Errorf("diff %s %s: %w", oldLabel, newLabel, err)
	}
	return out, nil
}

// diffText is the file docs/diffs/STEP.diff: each file's unified diff after a line naming it.
func diffText(changes []fileChange) []byte {
	var b bytes.Buffer
	for _, c := range changes {
		fmt.Fprintf(&b, "diff -u %s %s\n", c.oldLabel, c.newLabel)
		b.Write(c.unifiedDiff)
	}
	return b.Bytes()
}

// modulesOf lists the modules of go.mod that the Go files of step import.
func modulesOf(root, step string, required []string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "steps", step, "*.go"))
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", f, err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			best := ""
			for _, m := range required {
				if (path == m || strings.HasPrefix(path, m+"/")) && len(m) > len(best) {
					best = m
				}
			}
			if best != "" {
				used[best] = true
			}
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for m := range used {
			if !yield(m) {
				return
			}
		}
	}), nil
}

// requiredModules are the modules go.mod requires, read from its require directives.
func requiredModules(root string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var mods []string
	inBlock := false
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.SplitN(l, "//", 2)[0])
		switch {
		case len(f) == 0:
		case inBlock && f[0] == ")":
			inBlock = false
		case inBlock:
			mods = append(mods, f[0])
		case f[0] == "require" && len(f) == 2 && f[1] == "(":
			inBlock = true
		case f[0] == "require" && len(f) >= 3:
			mods = append(mods, f[1])
		}
	}
	if len(mods) == 0 {
		return nil, errors.New("go.mod requires no module")
	}
	return mods, nil
}

// region is the generated "File changes" section of step's README, markers included.
func region(step, prev string, changes []fileChange, modsBefore, modsNow []string) string {
	var b strings.Builder
	b.WriteString(regionBegin + "\n## File changes\n\n")
	diffLink := fmt.Sprintf("[docs/diffs/%s.diff](../../docs/diffs/%s.diff)", step, step)
	if prev == "" {
		fmt.Fprintf(&b, "Generated by `make docs`. The first step: every file is new; the whole text is in %s.\n\n", diffLink)
	} else {
		fmt.Fprintf(&b, "Generated by `make docs`: what this step changes in [%s](../%s/) (the README aside); "+
			"the whole diff is in %s, and `make stepdiff A=%s B=%s` shows it live.\n\n", prev, prev, diffLink, prev[:2], step[:2])
	}
	b.WriteString("| file | change | lines |\n|---|---|---|\n")
	for _, c := range changes {
		name := "`" + c.name + "`"
		if c.change != "removed" {
			name = "[" + name + "](" + c.name + ")"
		}
		lines := fmt.Sprintf("+%d −%d", c.plus, c.minus)
		switch c.change {
		case "added":
			lines = fmt.Sprintf("+%d", c.plus)
		case "removed":
			lines = fmt.Sprintf("−%d", c.minus)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, c.change, lines)
	}
	var added, dropped []string
	for _, m := range modsNow {
		if !slices.Contains(modsBefore, m) {
			added = append(added, "`"+m+"`")
		}
	}
	for _, m := range modsBefore {
		if !slices.Contains(modsNow, m) {
			dropped = append(dropped, "`"+m+"`")
		}
	}
	b.WriteString("\ngo.mod (one module for the whole repository): ")
	switch {
	case len(added) == 0 && len(dropped) == 0:
		b.WriteString("this step uses no module the previous one did not.\n")
	default:
		var parts []string
		if len(added) > 0 {
			parts = append(parts, "the step starts using "+strings.Join(added, ", "))
		}
		if len(dropped) > 0 {
			parts = append(parts, "it stops using "+strings.Join(dropped, ", "))
		}
		b.WriteString(strings.Join(parts, "; ") + ".\n")
	}
	b.WriteString(regionEnd)
	return b.String()
}

// withRegion is readme with its file-changes region replaced by r, or r appended when it has
// none. A region whose end marker is missing is an error: what follows it would be lost.
func withRegion(readme, r string) (string, error) {
	begin := strings.Index(readme, regionBegin)
	if begin < 0 {
		return strings.TrimRight(readme, "\n") + "\n\n" + r + "\n", nil
	}
	end := strings.Index(readme[begin:], regionEnd)
	if end < 0 {
		return "", errors.New(regionBegin + " has no " + regionEnd)
	}
	return readme[:begin] + r + readme[begin+end+len(regionEnd):], nil
}

// checkDiffs regenerates docs/diffs and the file-changes regions and compares, or with
// update writes them.
func checkDiffs(root string, update bool) []problem {
	dirs, err := steps(root)
	if err != nil {
		return []problem{{file: "steps", msg: err.Error()}}
	}
	required, err := requiredModules(root)
	if err != nil {
		return []problem{{file: "go.mod", msg: err.Error()}}
	}
	var probs []problem
	want := map[string]bool{}
	var modsBefore []string
	for i, step := range dirs {
		prev := ""
		if i > 0 {
			prev = dirs[i-1]
		}
		changes, err := delta(root, prev, step)
		if err != nil {
			probs = append(probs, problem{file: "steps/" + step, msg: err.Error()})
			continue
		}
		rel := "docs/diffs/" + step + ".diff"
		want[step+".diff"] = true
		probs = append(probs, compareFile(root, rel, diffText(changes), update)...)

		modsNow, err := modulesOf(root, step, required)
		if err != nil {
			probs = append(probs, problem{file: "steps/" + step, msg: err.Error()})
			continue
		}
		readmeRel := "steps/" + step + "/README.md"
		readme, err := os.ReadFile(filepath.Join(root, readmeRel))
		if err != nil {
			probs = append(probs, problem{file: readmeRel, msg: err.Error()})
			continue
		}
		text, err := withRegion(string(readme), region(step, prev, changes, modsBefore, modsNow))
		if err != nil {
			probs = append(probs, problem{file: readmeRel, line: lineOf(string(readme), regionBegin), marker: regionBegin, msg: err.Error()})
			continue
		}
		if text != string(readme) {
			if update {
				if err := os.WriteFile(filepath.Join(root, readmeRel), []byte(text), 0o644); err != nil {
					probs = append(probs, problem{file: readmeRel, msg: err.Error()})
				}
			} else {
				line := lineOf(string(readme), regionBegin)
				msg := "the file-changes region is stale (go test ./docs -update rewrites it)"
				if line == 0 {
					msg = "has no file-changes region (go test ./docs -update adds it)"
				}
				probs = append(probs, problem{file: readmeRel, line: line, marker: regionBegin, msg: msg})
			}
		}
		modsBefore = modsNow
	}
	// A diff of a step that is gone is stale too.
	kept, _ := filepath.Glob(filepath.Join(root, "docs", "diffs", "*.diff"))
	for _, k := range kept {
		if want[filepath.Base(k)] {
			continue
		}
		rel := "docs/diffs/" + filepath.Base(k)
		if update {
			if err := os.Remove(k); err != nil {
				probs = append(probs, problem{file: rel, msg: err.Error()})
			}
			continue
		}
		probs = append(probs, problem{file: rel, msg: "no step of that name (go test ./docs -update removes it)"})
	}
	return probs
}

// compareFile compares the file rel of root with want, or with update writes it.
func compareFile(root, rel string, want []byte, update bool) []problem {
	path := filepath.Join(root, rel)
	have, err := os.ReadFile(path)
	if err == nil && bytes.Equal(have, want) {
		return nil
	}
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return []problem{{file: rel, msg: err.Error()}}
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			return []problem{{file: rel, msg: err.Error()}}
		}
		return nil
	}
	if err != nil {
		return []problem{{file: rel, msg: "missing (go test ./docs -update writes it)"}}
	}
	return []problem{{file: rel, line: 1, msg: "stale (go test ./docs -update rewrites it)\n" + firstDifference(string(have), string(want))}}
}

// lineOf is the line (from 1) where s first appears in text, or 0.
func lineOf(text, s string) int {
	i := strings.Index(text, s)
	if i < 0 {
		return 0
	}
	return strings.Count(text[:i], "\n") + 1
}
