// SPDX-License-Identifier: Apache-2.0

// Tests of README anchors against headings whose GitHub anchors are known.
package mdanchor

import (
	"maps"
	"slices"
	"testing"
)

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Exercise 01.1: hand the socket over":             "exercise-011-hand-the-socket-over",
		"Exercise 01.2: share the caller's process group": "exercise-012-share-the-callers-process-group",
		"  Why `start` re-executes itself?  ":             "why-start-re-executes-itself",
		"snake_case and kebab-case":                       "snake_case-and-kebab-case",
		"Ünïcode stays":                                   "ünïcode-stays",
		"A -- B":                                          "a----b",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestAnchors(t *testing.T) {
	md := "# Step 01: bootstrap\n" +
		"Text.\n\n" +
		"## Exercises ##\n" +
		"### Exercise 01.1: hand the [socket](https://example.com) over\n" +
		"```sh\n# not a heading\n```\n" +
		"~~~\n## nor this\n~~~\n" +
		"## Exercises\n" +
		"Setext heading\n" +
		"--------------\n" +
		"#not-a-heading\n" +
		"    # indented code, not a heading\n"
	got, err := Anchors([]byte(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"exercise-011-hand-the-socket-over", "exercises", "exercises-1", "setext-heading", "step-01-bootstrap"}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
		t.Errorf("anchors %q, want %q", keys, want)
	}
}
