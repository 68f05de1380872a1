// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Marker kinds.
const (
	kindSnippet      = "snippet"
	kindOutput       = "output"
	kindDiagram      = "diagram"
	kindIllustrative = "illustrative"
)

// block is one marker and the fenced block after it.
type block struct {
	kind string
	arg  string // snippet: "PATH NAME"; output: the command; diagram: the name
	line int    // of the marker, from 1
	// start and end are the lines (indices from 0) of the block's content: lines[start:end].
	start, end int
	lang       string
}

// marker is how the block is named in messages.
func (b block) marker() string {
	if b.arg == "" {
		return "<!-- " + b.kind + " -->"
	}
	return "<!-- " + b.kind + ": " + b.arg + " -->"
}

// page is one Markdown file, split in lines (without their newlines).
type page struct {
	path   string // relative to the repository root, for messages
	abs    string
	lines  []string
	blocks []block
	fences [][2]int // every fenced block: its content lines[start:end]
}

// problem is one thing found wrong, named by file, line and marker.
type problem struct {
	file   string
	line   int
	marker string
	msg    string
}

func (p problem) String() string {
	if p.marker == "" {
		return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.file, p.line, p.marker, p.msg)
}

var (
	markerLine = regexp.MustCompile(`^<!--\s*(snippet|output|diagram|illustrative)(?::\s*(.*?))?\s*-->\s*$`)
	fenceOpen  = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")
)

// readPage reads and parses the Markdown file rel of root. A marker that is not followed by a
// fenced block, or that lacks its argument, is a problem.
func readPage(root, rel string) (*page, []problem) {
	abs := filepath.Join(root, rel)
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, []problem{{file: rel, msg: err.Error()}}
	}
	p := &page{path: rel, abs: abs, lines: strings.Split(string(data), "\n")}
	var probs []problem
	var pending *block
	for i := 0; i < len(p.lines); i++ {
		l := p.lines[i]
		if m := fenceOpen.FindStringSubmatch(l); m != nil {
			end := closingFence(p.lines, i+1, m[1])
			p.fences = append(p.fences, [2]int{i + 1, end})
			if pending != nil {
				pending.start, pending.end, pending.lang = i+1, end, m[2]
				p.blocks = append(p.blocks, *pending)
				pending = nil
			}
			i = end // the closing fence
			continue
		}
		if pending != nil && strings.TrimSpace(l) != "" {
			probs = append(probs, problem{p.path, pending.line, pending.marker(), "not followed by a fenced code block"})
			pending = nil
		}
		m := markerLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		b := block{kind: m[1], arg: m[2], line: i + 1}
		if (b.kind == kindIllustrative) != (b.arg == "") {
			probs = append(probs, problem{p.path, b.line, b.marker(), "illustrative takes no argument; the others need one"})
			continue
		}
		pending = &b
	}
	if pending != nil {
		probs = append(probs, problem{p.path, pending.line, pending.marker(), "not followed by a fenced code block"})
	}
	return p, probs
}

// closingFence is the index of the line closing a fence opened with open, searching from
// from; an unclosed fence runs to the end, as in CommonMark.
func closingFence(lines []string, from int, open string) int {
	for j := from; j < len(lines); j++ {
		t := strings.TrimLeft(lines[j], " ")
		if len(lines[j])-len(t) <= 3 && strings.HasPrefix(t, open[:1]) &&
			len(strings.TrimRight(t, " \t")) >= len(open) && strings.Trim(strings.TrimSpace(t), open[:1]) == "" {
			return j
		}
	}
	return len(lines)
}

// content is the text of b's block, each line ending in a newline.
func (p *page) content(b block) string {
	if b.end <= b.start {
		return ""
	}
	return strings.Join(p.lines[b.start:b.end], "\n") + "\n"
}

// replace sets the content of b's block to text and shifts the blocks after it. It reports
// whether anything changed.
func (p *page) replace(b block, text string) bool {
	if p.content(b) == text {
		return false
	}
	repl := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if text == "" {
		repl = nil
	}
	p.lines = slices.Concat(p.lines[:b.start], repl, p.lines[b.end:])
	shift := len(repl) - (b.end - b.start)
	for i := range p.blocks {
		if p.blocks[i].start == b.start {
			p.blocks[i].end += shift
		} else if p.blocks[i].start > b.start {
			p.blocks[i].start += shift
			p.blocks[i].end += shift
		}
	}
	return true
}

// write stores the page.
func (p *page) write() error {
	return os.WriteFile(p.abs, []byte(strings.Join(p.lines, "\n")), 0o644)
}

// pages lists the Markdown files checked, relative to root: docs/*.md and steps/*/README.md.
func pages(root string) ([]string, error) {
	var rels []string
	for _, pattern := range []string{"docs/*.md", "steps/*/README.md"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		for _, m := range matches {
			rel, err := filepath.Rel(root, m)
			if err != nil {
				return nil, err
			}
			rels = append(rels, rel)
		}
	}
	return rels, nil
}
