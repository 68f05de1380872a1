// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// median is the middle sample (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// p90 is the nearest-rank 90th percentile.
func p90(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	return s[int(math.Ceil(0.9*float64(len(s))))-1]
}

// ratio is final/reference of the medians.
func (r row) ratio() float64 { return median(r.final) / median(r.ref) }

// verdict says whether the row meets its target ("" for a row without one).
func (r row) verdict() string {
	if r.target == 0 {
		return ""
	}
	q := r.ratio()
	if median(r.ref) <= 0 || math.IsNaN(q) || math.IsInf(q, 0) {
		return "n/a"
	}
	if q <= r.target {
		return "met"
	}
	return "**missed**"
}

func format(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case unit == "ms":
		return fmt.Sprintf("%.1f", v)
	case unit == "MiB":
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

// tableHeader is the header of each generation's table; the smoke test reads tables by it.
const tableHeader = "| metric | unit | final median | final p90 | reference median | reference p90 | final/reference | target | |"

// markdown is the report: one table per containerd generation.
func (res *results) markdown(o options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# shimwalk benchmark, %s\n\n", res.started.Format("2006-01-02 15:04 UTC"))
	var uts unix.Utsname
	kernel := "?"
	if unix.Uname(&uts) == nil {
		kernel = unix.ByteSliceToString(uts.Release[:])
	}
	fmt.Fprintf(&b, "Linux %s, %d CPUs, %s; %d latency samples, %d bursts and %d memory readings per shim, taking turns; "+
		"memory read %v after the last start; took %v.\n", kernel, runtime.NumCPU(), runtime.Version(),
		o.rounds, o.bursts, o.memRounds, o.settle, res.took)
	fmt.Fprintf(&b, "final: `%s`. The ratio is final/reference of the medians; the target is the highest ratio accepted.\n",
		filepath.Base(o.shim))
	for _, g := range res.gens {
		fmt.Fprintf(&b, "\n## %s\n\nreference: `%s`\n\n", g.name, g.refs)
		b.WriteString(tableHeader + "\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, r := range g.rows {
			target := ""
			if r.target > 0 {
				target = fmt.Sprintf("≤ %.1f", r.target)
			}
			q := "—"
			if median(r.ref) > 0 {
				q = fmt.Sprintf("%.3f", r.ratio())
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.metric, r.unit,
				format(median(r.final), r.unit), format(p90(r.final), r.unit),
				format(median(r.ref), r.unit), format(p90(r.ref), r.unit), q, target, r.verdict())
		}
	}
	res.floorMarkdown(&b, o)
	return b.String()
}

// floorHeading heads the skeleton's table; the smoke test finds it by this.
const floorHeading = "## The floor of the prescribed transport"

// floorMarkdown holds the skeleton's rows against the targets of the generations' rows: the
// target in MiB is the row's highest accepted ratio times the reference's median.
func (res *results) floorMarkdown(b *strings.Builder, o options) {
	if len(res.floor) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s\n\nskeleton: `%s`, steps/02-ttrpc built as the final shim is: containerd's Task API over ttrpc, "+
		"the dependencies docs/architecture.md names, and no container. A skeleton above a target (skeleton/target over 1) "+
		"means no shim on that transport can meet the target.\n\n", floorHeading, filepath.Base(o.skeleton))
	b.WriteString("| metric | unit | skeleton median | skeleton p90 |")
	align := "|---|---|---:|---:|"
	for _, g := range res.gens {
		fmt.Fprintf(b, " target, %s | skeleton/target |", strings.TrimPrefix(g.name, "containerd "))
		align += "---:|---:|"
	}
	b.WriteString("\n" + align + "\n")
	for _, f := range res.floor {
		fmt.Fprintf(b, "| %s | MiB | %.3f | %.3f |", f.metric, median(f.samples), p90(f.samples))
		for _, g := range res.gens {
			target, q := "—", "—"
			for _, r := range g.rows {
				if r.metric == f.versus && r.target > 0 && median(r.ref) > 0 {
					t := r.target * median(r.ref)
					target, q = fmt.Sprintf("%.3f", t), fmt.Sprintf("%.2f", median(f.samples)/t)
				}
			}
			fmt.Fprintf(b, " %s | %s |", target, q)
		}
		b.WriteString("\n")
	}
}

// write puts the table and the chart in o.out as <date>.md and <date>.png, copies them to
// latest.md and latest.png, and updates the README's section when o.readme is set.
func (res *results) write(o options, table string) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	date := res.started.Format("2006-01-02")
	png, err := res.chart()
	if err != nil {
		return err
	}
	md := table + fmt.Sprintf("\n![shim PSS against container count](%s.png)\n", date)
	latest := table + "\n![shim PSS against container count](latest.png)\n"
	files := []struct {
		name string
		data []byte
	}{
		{date + ".md", []byte(md)}, {date + ".png", png},
		{"latest.md", []byte(latest)}, {"latest.png", png},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(o.out, f.name), f.data, 0o644); err != nil {
			return fmt.Errorf("results: %w", err)
		}
	}
	if o.readme == "" {
		return nil
	}
	return updateReadme(o.readme, table, filepath.Join(o.out, "latest.png"))
}

// The README's generated section lies between these lines.
const (
	readmeBegin = "<!-- bench: generated by make bench, do not edit -->"
	readmeEnd   = "<!-- bench: end -->"
)

// updateReadme replaces the README's generated section with table (headings pushed down two
// levels to sit under the README's own) and the chart at png.
func updateReadme(readme, table, png string) error {
	data, err := os.ReadFile(readme)
	if err != nil {
		return fmt.Errorf("readme: %w", err)
	}
	begin, end := bytes.Index(data, []byte(readmeBegin)), bytes.Index(data, []byte(readmeEnd))
	if begin < 0 || end < begin {
		return fmt.Errorf("readme: %s has no section between %q and %q", readme, readmeBegin, readmeEnd)
	}
	rel, err := filepath.Rel(filepath.Dir(readme), png)
	if err != nil {
		return fmt.Errorf("readme: %w", err)
	}
	var section strings.Builder
	section.WriteString(readmeBegin + "\n\n")
	for _, line := range strings.Split(strings.TrimRight(table, "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			line = "##" + line
		}
		section.WriteString(line + "\n")
	}
	fmt.Fprintf(&section, "\n![shim PSS against container count](%s)\n\n", filepath.ToSlash(rel))
	out := append([]byte{}, data[:begin]...)
	out = append(out, section.String()...)
	out = append(out, data[end:]...)
	if err := os.WriteFile(readme, out, 0o644); err != nil {
		return fmt.Errorf("readme: %w", err)
	}
	return nil
}
