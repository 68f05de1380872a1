// SPDX-License-Identifier: Apache-2.0

// Package docs holds the walkthrough (the Markdown pages beside this file) and, in its tests,
// the machinery that keeps it true: `go test ./docs` checks every page and `go test ./docs
// -update` (which `make docs` runs after `make build`) regenerates what is generated.
//
// The pages checked are docs/*.md and steps/*/README.md. A marker is an HTML comment on a line
// of its own, directly followed by a fenced block whose content the check owns:
//
//	<!-- snippet: steps/04-subreaper/reaper.go reapLoop -->
//	<!-- output: bin/shimctl demo --step 04 -->
//	<!-- diagram: 04-subreaper -->
//	<!-- illustrative -->
//
// A snippet is the declaration named — a function (reapLoop), a method (reaper.Start, for a
// pointer or a value receiver), or a type, var or const (reaper) — with its doc comment, as
// go/parser finds it in the file; the check fails when it differs or is gone.
//
// An output block is the stdout of its command, run with sh -c from the repository root as root,
// with the binaries of bin/ rebuilt first, and with a private state directory (SHIMCTL_STATE),
// socket directory, runc root and TMPDIR. Add 2>&1 to show stderr too. Output blocks run one
// after another, in page order, so that two commands naming the same task never meet. Before
// it is compared or written, the output is masked: pids, unix:// addresses, temporary paths,
// long hex ids, timestamps and durations become <pid>, <addr>, <tmp>, <hex>, <time> and
// <dur>, and paths in the repository begin with <repo>.
//
// A diagram block holds docs/diagrams/NAME.mmd, the Mermaid sequence diagram that `shimctl trace
// mermaid` draws from a traced run of the scenario the table in diagrams_test.go gives NAME.
// It is compared masked as output is; the events a shim forwards arrive while calls are
// answered, so their place may change from run to run: the other lines are compared in order,
// the events (and the exits they report) as a set; and a Shutdown whose reply the exiting shim
// cut off counts as answered, as it does for the driver. -update rewrites a diagram only when it
// differs so, and keeps the real values of its run otherwise.
//
// An illustrative block shows output that no test can produce (a real containerd, a process
// tree at a given moment); the prose in the twenty lines before it or the eight after must say
// "illustrative".
// A block that shows a command after a "$ " prompt followed by its output needs one of the
// output or illustrative markers.
//
// Generated as well: docs/diffs/NN-<step>.diff, the diff of each step's Go files against the
// previous step's (step 01's against nothing), and in each step's README the region between
// <!-- file-changes:begin --> and <!-- file-changes:end --> that lists the files added,
// modified and removed and the modules the step starts or stops using (go.mod). The README
// itself is left out of the diff: it is prose about its own step.
//
// Checked too: every exercise id a page names (`make exercise EX=04.2`, "exercise 04.2") is in
// the table of tools/exercise, and every relative link of a page leads to a file of the
// repository, and to a heading of it when it has an #anchor.
package docs
