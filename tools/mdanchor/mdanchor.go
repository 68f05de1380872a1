// SPDX-License-Identifier: Apache-2.0

// Package mdanchor computes the anchors GitHub gives the headings of a Markdown file, so that
// links to a heading (a stub's panic message, a link in docs/) can be checked to land.
package mdanchor

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Slug is GitHub's anchor for a heading: lower case, punctuation dropped except '-' and '_',
// each space a '-'.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	fence      = regexp.MustCompile("^ {0,3}(```|~~~)")
	link       = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// headingText is what GitHub renders of a heading's markdown, as far as anchors care: link text
// without its target; other markup is punctuation that Slug drops.
func headingText(md string) string {
	return link.ReplaceAllString(md, "$1")
}

// Anchors returns the anchors of md's headings. Repeated headings get "-1", "-2", ... as on
// GitHub; headings inside fenced code blocks are not headings.
func Anchors(md []byte) (map[string]bool, error) {
	anchors := map[string]bool{}
	seen := map[string]int{}
	add := func(text string) {
		s := Slug(headingText(text))
		if n := seen[s]; n > 0 {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n)
		} else {
			seen[s] = 1
		}
		anchors[s] = true
	}
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(nil, 1<<20)
	var inFence string
	prev := "" // the previous line, if it could be the text of a setext heading
	for sc.Scan() {
		line := sc.Text()
		if m := fence.FindStringSubmatch(line); m != nil {
			switch inFence {
			case "":
				inFence = m[1]
			case m[1]:
				inFence = ""
			}
			prev = ""
			continue
		}
		if inFence != "" {
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			add(m[1])
			prev = ""
			continue
		}
		if prev != "" && setextLine.MatchString(line) {
			add(prev)
			prev = ""
			continue
		}
		prev = strings.TrimSpace(line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read headings: %w", err)
	}
	return anchors, nil
}
