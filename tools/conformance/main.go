// SPDX-License-Identifier: Apache-2.0

// Command conformance runs containerd v2.4.2's integration/client suite, unmodified, once with
// containerd-shim-runc-v2 and once with the final shim, offline, and compares them test by test:
// `make conformance` (scripts/conformance.sh builds the suite and calls `conformance run`).
//
//	conformance run -suite client.test -containerd-bin DIR -shim-bin DIR -fp-bin DIR -out DIR -doc docs/deploy.md
//	conformance report -out DIR -doc docs/deploy.md   (the table again from a run's results)
//
// Exit status 1 when a test passes with the reference and not with the final shim.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: conformance run|report [flags] (-h for the flags)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(ctx, os.Args[2:])
	case "report":
		err = reportCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want run or report", os.Args[1])
	}
	if err == errRegressions {
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
}

// reportOpts are where a comparison goes.
type reportOpts struct {
	out    string // directory holding reference.json and final.json
	doc    string // file with the generated section, "" for none
	shared string // a Markdown file for the shim's engineers: table and failures, "" for none
	// partial is a run of some tests (-run): it writes its results to out/partial, only tests
	// both runs hold are compared, and the document, which shows whole runs, is left alone.
	partial bool
}

// resultsDir is where a run writes its results: a partial one must not replace a whole run's.
func (o *reportOpts) resultsDir() string {
	if o.partial {
		return filepath.Join(o.out, "partial")
	}
	return o.out
}

// resultsFile is a shim's results from this run, or from the last whole run when this one,
// restricted to the other shim (-shim), has none.
func (o *reportOpts) resultsFile(name string) string {
	p := filepath.Join(o.resultsDir(), name)
	if _, err := os.Stat(p); err != nil {
		return filepath.Join(o.out, name)
	}
	return p
}

func (o *reportOpts) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.out, "out", "", "directory of the run's results (reference.json, final.json, logs)")
	fs.StringVar(&o.doc, "doc", "", "Markdown file whose conformance section receives the table")
	fs.StringVar(&o.shared, "results", "", "also write the table and each regression's output to this file")
}

func reportCmd(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var o reportOpts
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.out == "" {
		return fmt.Errorf("report: -out is required")
	}
	return report(o)
}

// report compares the two runs in o.out, prints the table and the regressions, and writes the
// document and the results file.
func report(o reportOpts) error {
	ref, err := readResultsFile(o.resultsFile("reference.json"))
	if err != nil {
		return err
	}
	final, err := readResultsFile(o.resultsFile("final.json"))
	if err != nil {
		return err
	}
	if o.partial {
		ref, final = both(ref, final)
	}
	tbl := table(ref, final)
	// How long each suite run took (with its restarts after a hang), as runCmd recorded it.
	var took []string
	for _, s := range shims {
		if d, err := os.ReadFile(o.resultsFile(s.name + ".time")); err == nil {
			took = append(took, fmt.Sprintf("%s (%s) %s", s.name, s.runtime, strings.TrimSpace(string(d))))
		}
	}
	if took != nil && !o.partial {
		tbl = "Suite run time: " + strings.Join(took, ", ") + ".\n\n" + tbl
	}
	fails := failures(ref, final, 12)
	fmt.Print(tbl)
	if fails != "" {
		fmt.Print("\nPassing with containerd-shim-runc-v2, not with the final shim:\n\n" + fails)
	}
	if o.doc != "" && !o.partial {
		doc, err := os.ReadFile(o.doc)
		if err != nil {
			return err
		}
		updated, err := replaceSection(string(doc), tbl)
		if err != nil {
			return fmt.Errorf("%s: %w", o.doc, err)
		}
		if err := os.WriteFile(o.doc, []byte(updated), 0o644); err != nil {
			return err
		}
	}
	if o.shared != "" {
		text := "# Conformance: containerd v2.4.2 integration/client\n\n" + tbl
		if fails != "" {
			text += "\n## Passing with containerd-shim-runc-v2, not with the final shim (final shim's output, trimmed)\n\n" + fails
		}
		if err := os.WriteFile(o.shared, []byte(text), 0o644); err != nil {
			return err
		}
	}
	if len(regressions(ref, final)) > 0 {
		return errRegressions
	}
	return nil
}

var errRegressions = fmt.Errorf("tests pass with containerd-shim-runc-v2 and not with the final shim")
