// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// rowsWanted are the metrics every generation's table must have, by the start of their name.
var rowsWanted = []string{
	"shim PSS per container, 1 container(s)",
	"shim RSS per container, 1 container(s)",
	"threads per shim, 1 container(s)",
	"shim PSS per added container, 2 containers grouped",
	"detached start",
	"run to exit, ",
	"exec, ",
	"exit notification",
	"burst, 2 parallel",
	"floor: ",
	"run to exit above the runc floor",
	"shim binary size",
}

// TestSmoke runs the benchmark with the smallest counts under both containerd generations and
// checks that it measured every row for both shims, wrote its files, and left nothing running.
func TestSmoke(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireCommand(t, "containerd", "ctr", "runc", "busybox", "containerd-shim-runc-v2")
	t.Parallel()
	shim := testkit.Binary(t, "final/cmd/containerd-shim-shimwalk-v2")
	skeleton := testkit.Binary(t, "steps/02-ttrpc")
	bench := testkit.Binary(t, "bench")
	out := testkit.TempDir(t)
	// Not below WorkDir: a shim's socket path must stay within 108 bytes.
	tmp, err := os.MkdirTemp("", "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(tmp) })
	readme := filepath.Join(out, "README.md")
	if err := os.WriteFile(readme, []byte("# x\n\n"+readmeBegin+"\nold\n"+readmeEnd+"\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// TMPDIR puts the benchmark's private containerds where this test can tell them from others.
	r := testkit.Run(t, "", []string{"TMPDIR=" + tmp}, bench, "-shim", shim, "-skeleton", skeleton, "-repo", testkit.RepoRoot(t),
		"-counts", "1", "-group", "2", "-mem-rounds", "1", "-rounds", "1", "-bursts", "1", "-burst-size", "2", "-settle", "0s",
		"-out", out, "-readme", readme)
	if r.Code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	tables := parseTables(t, r.Stdout)
	if len(tables) != 2 || !strings.HasPrefix(tables[0].name, "containerd 1.6") || !strings.HasPrefix(tables[1].name, "containerd 2.") {
		t.Fatalf("want tables for containerd 1.6 and 2.x, got %d:\n%s", len(tables), r.Stdout)
	}
	for _, tb := range tables {
		for _, want := range rowsWanted {
			cells, ok := tb.rows[want]
			if !ok {
				t.Errorf("%s: no row %q", tb.name, want)
				continue
			}
			// final median and p90, reference median and p90, ratio: all positive numbers. A
			// difference of medians from one sample each may come out at or below zero, and
			// then it has no ratio.
			last := 6
			if want == "run to exit above the runc floor" {
				last = 5
			}
			for i := 2; i <= last; i++ {
				v, err := strconv.ParseFloat(cells[i], 64)
				if err != nil || math.IsNaN(v) || (last == 6 && v <= 0) {
					t.Errorf("%s, %s: column %d is %q, want a positive number", tb.name, want, i, cells[i])
				}
			}
		}
	}
	checkFloor(t, r.Stdout)
	debian, err := exec.LookPath("containerd-shim-runc-v2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Stdout, "reference: `"+debian+"`") ||
		!regexp.MustCompile("reference: `/\\S+/containerd-v2[^/]*/bin/containerd-shim-runc-v2`").MatchString(r.Stdout) {
		t.Errorf("the references are not Debian's 1.6 shim and the 2.x one:\n%s", r.Stdout)
	}
	date := time.Now().UTC().Format("2006-01-02")
	for _, name := range []string{date + ".md", "latest.md"} {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Contains(data, []byte(tableHeader)) {
			t.Errorf("%s: %v, or it holds no table", name, err)
		}
	}
	checkChart(t, filepath.Join(out, date+".png"))
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(data); strings.Contains(s, "\nold\n") || !strings.Contains(s, tableHeader) || !strings.HasSuffix(s, readmeEnd+"\nafter\n") {
		t.Errorf("README section not replaced:\n%s", s)
	}
	// The benchmark removes its work directory, and with it every socket and state file; its
	// containerds and shims ran with that directory in their command lines.
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		t.Errorf("left in TMPDIR: %v", entries)
	}
	for _, pid := range processesMentioning(tmp) {
		t.Errorf("process %d outlived the benchmark", pid)
	}
}

// checkFloor checks the skeleton's table: its two rows, each with a median and p90 and, for
// both generations, a positive target and a ratio.
func checkFloor(t *testing.T, out string) {
	t.Helper()
	_, section, ok := strings.Cut(out, floorHeading+"\n")
	if !ok {
		t.Fatalf("no %q section:\n%s", floorHeading, out)
	}
	found := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| skeleton PSS per ") {
			continue
		}
		found++
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 8 {
			t.Errorf("floor row with %d cells, want 8 (two generations): %q", len(cells), line)
			continue
		}
		// One added connection can reuse a stack and buffers the shim freed before, and with
		// them pages it already had: zero is a measurement there, not a failure.
		added := strings.Contains(cells[0], "added connection")
		for i := 2; i < len(cells); i++ {
			v, err := strconv.ParseFloat(strings.TrimSpace(cells[i]), 64)
			if err != nil || v < 0 || (v == 0 && (!added || i == 4 || i == 6)) {
				t.Errorf("floor row %q: column %d is %q, want a positive number", cells[0], i, cells[i])
			}
		}
	}
	if found != 2 {
		t.Errorf("%d skeleton rows, want 2 (1 shim, added connection):\n%s", found, section)
	}
}

// table is one generation's table: cells by the metric's name.
type table struct {
	name string
	rows map[string][]string
}

// parseTables reads the markdown tables under "## " headings; cells[0] is the metric.
func parseTables(t *testing.T, out string) []table {
	t.Helper()
	var tables []table
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == floorHeading:
			return tables // the skeleton's table, which checkFloor reads
		case strings.HasPrefix(line, "## "):
			tables = append(tables, table{name: strings.TrimPrefix(line, "## "), rows: map[string][]string{}})
		case strings.HasPrefix(line, "| ") && line != tableHeader && len(tables) > 0:
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if len(cells) != 9 {
				t.Fatalf("row with %d cells, want 9: %q", len(cells), line)
			}
			for _, want := range rowsWanted {
				if strings.HasPrefix(cells[0], want) {
					tables[len(tables)-1].rows[want] = cells
				}
			}
		}
	}
	return tables
}

// checkChart decodes the chart and looks for both shims' colours in it.
func checkChart(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b != image.Rect(0, 0, chartW, chartH) {
		t.Errorf("chart is %v, want %dx%d", b, chartW, chartH)
	}
	for k, c := range shimColour {
		if !hasColour(img, c) {
			t.Errorf("no pixel of shim %d's colour %v in the chart", k, c)
		}
	}
}

func hasColour(img image.Image, c interface{ RGBA() (r, g, b, a uint32) }) bool {
	wr, wg, wb, _ := c.RGBA()
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r == wr && g == wg && bl == wb {
				return true
			}
		}
	}
	return false
}

// processesMentioning lists the live processes whose command line holds s.
func processesMentioning(s string) []int {
	return driver.ProcessesWhere(func(args []string) bool { return strings.Contains(strings.Join(args, " "), s) })
}

func TestFlagsRefuseBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-counts", "0"}, "-counts"},
		{[]string{"-counts", "1,x"}, "-counts"},
		{[]string{"-containerd", "1.7"}, "-containerd"},
		{[]string{"-group", "1"}, "-group"},
		{[]string{"-rounds", "0"}, "-rounds"},
		{[]string{"-mem-rounds", "0"}, "-mem-rounds"},
		{[]string{"-burst-size", "0"}, "-burst-size"},
		{[]string{"-settle", "-1s"}, "-settle"},
		{[]string{"-shim", "/nonexistent/shim"}, "not an executable"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		var stderr bytes.Buffer
		if _, err := parseFlags(c.args, &stderr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one about %s", c.args, err, c.want)
		}
	}
}

func TestStatistics(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	if m := median(xs); m != 5.5 {
		t.Errorf("median = %v, want 5.5", m)
	}
	if m := median(xs[:5]); m != 3 {
		t.Errorf("median of 5 = %v, want 3", m)
	}
	if p := p90(xs); p != 9 {
		t.Errorf("p90 = %v, want 9", p)
	}
	if !math.IsNaN(median(nil)) || !math.IsNaN(p90(nil)) {
		t.Error("statistics of no samples are not NaN")
	}
	r := row{final: []float64{4}, ref: []float64{10}, target: 0.5}
	if v := r.verdict(); v != "met" {
		t.Errorf("0.4 against ≤ 0.5: %q", v)
	}
	r.target = 0.2
	if v := r.verdict(); v != "**missed**" {
		t.Errorf("0.4 against ≤ 0.2: %q", v)
	}
}

func TestReadmeWithoutSection(t *testing.T) {
	t.Parallel()
	readme := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(readme, []byte("# no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updateReadme(readme, "table\n", "x.png"); err == nil {
		t.Error("a README without the section was accepted")
	}
	if data, _ := os.ReadFile(readme); string(data) != "# no markers\n" {
		t.Errorf("README changed: %q", data)
	}
}
