// SPDX-License-Identifier: Apache-2.0

// Results of one run of the suite per shim, read from `go tool test2json` events, and the
// comparison the conformance check makes: a test that passes with containerd-shim-runc-v2 and
// does not with the final shim is a regression; anything else (both fail, both skip, the final
// shim passes more) is reported but allowed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// outcome of one test with one shim.
type outcome struct {
	Action string   // pass, fail, skip, hung (stopped by runShim); "" when it never ended
	Output []string // the test's own lines
}

// event is the part of a test2json event the report uses.
type event struct {
	Action string
	Test   string
	Output string
}

// readResults collects every test's outcome from a test2json stream.
func readResults(r io.Reader) (map[string]*outcome, error) {
	res := map[string]*outcome{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("test2json event %.80q: %w", line, err)
		}
		if ev.Test == "" {
			continue
		}
		o := res[ev.Test]
		if o == nil {
			o = &outcome{}
			res[ev.Test] = o
		}
		switch ev.Action {
		case "pass", "fail", "skip", "hung":
			o.Action = ev.Action
		case "output":
			o.Output = append(o.Output, strings.TrimRight(ev.Output, "\n"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading test2json: %w", err)
	}
	return res, nil
}

func readResultsFile(path string) (map[string]*outcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res, err := readResults(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

func word(o *outcome) string {
	switch {
	case o == nil:
		return "not run"
	case o.Action == "":
		return "unfinished"
	}
	return o.Action
}

// both keeps the tests that both runs hold.
func both(ref, final map[string]*outcome) (map[string]*outcome, map[string]*outcome) {
	r, f := map[string]*outcome{}, map[string]*outcome{}
	for n, o := range ref {
		if final[n] != nil {
			r[n], f[n] = o, final[n]
		}
	}
	return r, f
}

// regressions are the tests that pass with the reference and not with the final shim.
func regressions(ref, final map[string]*outcome) []string {
	var out []string
	for name, o := range ref {
		if o.Action == "pass" && (final[name] == nil || final[name].Action != "pass") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// table is the Markdown table of every test either run saw, with a summary line first.
func table(ref, final map[string]*outcome) string {
	names := map[string]bool{}
	for n := range ref {
		names[n] = true
	}
	for n := range final {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	// A run cut short (-shim-timeout, -starts) never got to some tests: they are counted too.
	count := func(res map[string]*outcome) string {
		c := map[string]int{}
		for _, n := range sorted {
			c[word(res[n])]++
		}
		line := fmt.Sprintf("%d pass, %d fail, %d hung, %d skip", c["pass"], c["fail"], c["hung"], c["skip"])
		if c["not run"] > 0 {
			line += fmt.Sprintf(", %d not run", c["not run"])
		}
		return line
	}
	var b strings.Builder
	reg := regressions(ref, final)
	fmt.Fprintf(&b, "containerd-shim-runc-v2: %s. Final shim: %s. Passing with the reference and not with the final shim: %d.\n\n",
		count(ref), count(final), len(reg))
	b.WriteString("| Test | containerd-shim-runc-v2 | final shim |\n|---|---|---|\n")
	for _, n := range sorted {
		r, f := word(ref[n]), word(final[n])
		if r == "pass" && f != "pass" {
			f = "**" + f + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", n, r, f)
	}
	return b.String()
}

// trimmed keeps a failure's telling lines: from the test's first own message (file_test.go:N)
// on, at most max of them and the verdict. The suite's client logs every request at debug
// level through log_hook.go, and a failed assertion can follow with a whole process list:
// either would bury the message.
func trimmed(o *outcome, max int) []string {
	if o == nil {
		return []string{"(the final shim's run has no such test)"}
	}
	var keep []string
	for _, l := range o.Output {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "log_hook.go:") {
			continue
		}
		if len(l) > maxLine {
			l = l[:maxLine] + " …"
		}
		keep = append(keep, l)
	}
	for i, l := range keep {
		if strings.Contains(l, "_test.go:") {
			keep = keep[i:]
			break
		}
	}
	if len(keep) > max+1 {
		last := keep[len(keep)-1]
		keep = append(keep[:max:max], fmt.Sprintf("(%d more lines left out)", len(keep)-max-1), last)
	}
	return keep
}

// maxLine cuts a line of output: a failed assertion can print a whole configuration in one.
const maxLine = 300

// failures lists each regression with its trimmed output from the final shim's run.
func failures(ref, final map[string]*outcome, max int) string {
	var b strings.Builder
	for _, n := range regressions(ref, final) {
		fmt.Fprintf(&b, "### %s\n\n```\n%s\n```\n\n", n, strings.Join(trimmed(final[n], max), "\n"))
	}
	return b.String()
}

// Markers of the generated section in docs/deploy.md.
const (
	beginMarker = "<!-- conformance: generated by make conformance, do not edit -->"
	endMarker   = "<!-- conformance: end -->"
)

// replaceSection puts body between the markers of doc, which must hold them once each, in order.
func replaceSection(doc, body string) (string, error) {
	i := strings.Index(doc, beginMarker)
	j := strings.Index(doc, endMarker)
	if i < 0 || j < i || strings.Count(doc, beginMarker) != 1 || strings.Count(doc, endMarker) != 1 {
		return "", fmt.Errorf("want one %q followed by one %q", beginMarker, endMarker)
	}
	return doc[:i+len(beginMarker)] + "\n" + body + doc[j:], nil
}
