// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/shimwalk/shimwalk/tools/mdanchor"
)

// exerciseIDs reads the ids of the exercise table in tools/exercise/exercises.go: the ID of
// every composite literal in it. The table is in a main package, which cannot be imported.
func exerciseIDs(root string) (map[string]bool, error) {
	path := filepath.Join(root, "tools", "exercise", "exercises.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("read the exercise table: %w", err)
	}
	ids := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		key, ok := kv.Key.(*ast.Ident)
		lit, isLit := kv.Value.(*ast.BasicLit)
		if ok && key.Name == "ID" && isLit && lit.Kind == token.STRING {
			if id, err := strconv.Unquote(lit.Value); err == nil {
				ids[id] = true
			}
		}
		return true
	})
	if len(ids) == 0 {
		return nil, fmt.Errorf("no exercise ids found in %s", path)
	}
	return ids, nil
}

// exerciseMention finds the exercise ids a page names: make exercise/check EX=04.2, exercise
// 04.2 (any case).
var exerciseMention = regexp.MustCompile(`(?i)(?:\bEX=|\bexercises? )(\d\d\.\d+)\b`)

func checkExerciseIDs(p *page, ids map[string]bool) []problem {
	var probs []problem
	for i, l := range p.lines {
		for _, m := range exerciseMention.FindAllStringSubmatch(l, -1) {
			if !ids[m[1]] {
				probs = append(probs, problem{p.path, i + 1, "", fmt.Sprintf("exercise %s is not in tools/exercise/exercises.go", m[1])})
			}
		}
	}
	return probs
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
)

// checkLinks checks that every relative link of p leads to a file or directory of the
// repository and, for an #anchor into a Markdown file, to one of its headings.
func checkLinks(root string, p *page) []problem {
	var probs []problem
	inFence := p.fenceLines()
	for i, l := range p.lines {
		if inFence[i] {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(l, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			abs := p.abs
			if file != "" {
				abs = filepath.Join(filepath.Dir(p.abs), filepath.FromSlash(file))
			}
			rel, err := filepath.Rel(root, abs)
			if err != nil || strings.HasPrefix(rel, "..") {
				probs = append(probs, problem{p.path, i + 1, "", fmt.Sprintf("link %s leaves the repository", target)})
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				probs = append(probs, problem{p.path, i + 1, "", fmt.Sprintf("link %s: no such file %s", target, rel)})
				continue
			}
			if anchor == "" || !strings.HasSuffix(abs, ".md") {
				continue
			}
			data, err := os.ReadFile(abs)
			if err != nil {
				probs = append(probs, problem{p.path, i + 1, "", fmt.Sprintf("link %s: %v", target, err)})
				continue
			}
			anchors, err := mdanchor.Anchors(data)
			if err != nil {
				probs = append(probs, problem{p.path, i + 1, "", fmt.Sprintf("link %s: %v", target, err)})
				continue
			}
			if !anchors[strings.ToLower(anchor)] {
				probs = append(probs, problem{p.path, i + 1, "", fmt.Sprintf("link %s: %s has no heading with the anchor #%s", target, rel, anchor)})
			}
		}
	}
	return probs
}

// fenceLines marks the lines of p inside fenced blocks, fences included.
func (p *page) fenceLines() map[int]bool {
	in := map[int]bool{}
	for _, f := range p.fences {
		for j := f[0] - 1; j <= f[1] && j < len(p.lines); j++ {
			in[j] = true
		}
	}
	return in
}

// checkUnmarked finds blocks that show a command's output without an output or illustrative
// marker: a "$ " prompt line followed by lines that are not commands. It also asks of every
// illustrative block that the prose near it says so.
func checkUnmarked(p *page) []problem {
	var probs []problem
	marked := map[int]block{}
	for _, b := range p.blocks {
		marked[b.start] = b
	}
	for _, f := range p.fences {
		if b, ok := marked[f[0]]; ok {
			if b.kind == kindIllustrative && !saysIllustrative(p, b) {
				probs = append(probs, problem{p.path, b.line, b.marker(), `the prose around the block must say that its output is illustrative`})
			}
			continue
		}
		prompt, output := false, false
		for _, l := range p.lines[f[0]:min(f[1], len(p.lines))] {
			t := strings.TrimSpace(l)
			switch {
			case strings.HasPrefix(t, "$ ") || t == "$":
				prompt = true
			case prompt && t != "" && !strings.HasPrefix(t, "#"):
				output = true
			}
		}
		if prompt && output {
			probs = append(probs, problem{p.path, f[0], "", "a block shows a command's output: precede it with <!-- output: COMMAND --> or <!-- illustrative -->"})
		}
	}
	return probs
}

// saysIllustrative reports whether "illustrative" is written within twenty lines before b's
// marker or eight after its block: in the paragraph that introduces or follows it.
func saysIllustrative(p *page, b block) bool {
	from, to := max(b.line-21, 0), min(b.end+9, len(p.lines))
	for i := from; i < to; i++ {
		if i == b.line-1 || (i >= b.start && i < b.end) {
			continue
		}
		if strings.Contains(strings.ToLower(p.lines[i]), "illustrative") {
			return true
		}
	}
	return false
}
