// SPDX-License-Identifier: Apache-2.0

// Command bench measures the final shim against containerd's own containerd-shim-runc-v2, side by
// side, under a private containerd of each generation (Debian's 1.6 and the 2.x that
// scripts/containerd2.sh builds): shim memory per container, the latencies an operator feels, the
// floor that runc alone sets, and binary sizes. The shims take turns (A B, then B A) so that drift
// on a busy machine falls on both. `make bench` runs it; see bench/NOTES.md for what it found.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the knobs of one run; the defaults are what `make bench` measures.
type options struct {
	shim        string // the final shim's binary
	skeleton    string // steps/02-ttrpc's shim, built as the final one; "" measures no floor
	generations []string
	counts      []int // containers for the one-shim-each memory rows
	group       int   // containers sharing one shim
	memRounds   int   // readings of every memory row, per shim
	rounds      int   // samples of each latency, per shim
	bursts      int   // samples of the parallel start
	burstSize   int
	settle      time.Duration // between the last start and a memory reading
	out         string        // directory for <date>.md and <date>.png; "" writes no files
	readme      string        // README whose benchmark section is replaced; "" leaves it
	repo        string        // the repository root, where scripts/containerd2.sh is
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "bench: must run as root (it runs containerd and containers)")
		return 1
	}
	started := time.Now().UTC()
	res, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	res.started, res.took = started, time.Since(started).Round(time.Second)
	table := res.markdown(o)
	fmt.Fprint(stdout, table)
	if o.out != "" {
		if err := res.write(o, table); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var gens, counts string
	fs.StringVar(&o.shim, "shim", "bin/containerd-shim-shimwalk-v2", "the final shim's binary (make build puts it there)")
	fs.StringVar(&o.skeleton, "skeleton", "", "steps/02-ttrpc's shim built as the final one (make bench builds it): the transport's floor; empty skips it")
	fs.StringVar(&gens, "containerd", "1.6,2", "containerd generations to run: 1.6, 2, or both")
	fs.StringVar(&counts, "counts", "1,10,50", "containers for the memory rows, one shim each")
	fs.IntVar(&o.group, "group", 10, "containers sharing one shim (at least 2)")
	fs.IntVar(&o.memRounds, "mem-rounds", 2, "readings of every memory row, per shim")
	fs.IntVar(&o.rounds, "rounds", 25, "samples of each latency, per shim")
	fs.IntVar(&o.bursts, "bursts", 5, "samples of the parallel start, per shim")
	fs.IntVar(&o.burstSize, "burst-size", 20, "containers started at once in a burst")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "wait between the last start and a memory reading")
	fs.StringVar(&o.out, "out", "", "directory for the results (<date>.md, <date>.png, latest.*); empty writes none")
	fs.StringVar(&o.readme, "readme", "", "README whose Benchmarks section is replaced with the results")
	fs.StringVar(&o.repo, "repo", ".", "the repository root")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, g := range strings.Split(gens, ",") {
		switch g = strings.TrimSpace(g); g {
		case "1.6", "2":
			o.generations = append(o.generations, g)
		default:
			return o, fmt.Errorf("-containerd: %q is neither 1.6 nor 2", g)
		}
	}
	for _, c := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > 500 {
			return o, fmt.Errorf("-counts: %q is not a count from 1 to 500", c)
		}
		o.counts = append(o.counts, n)
	}
	switch {
	case o.group < 2 || o.group > 500:
		return o, fmt.Errorf("-group %d: want 2 to 500", o.group)
	case o.rounds < 1:
		return o, fmt.Errorf("-rounds %d: want at least 1", o.rounds)
	case o.memRounds < 1:
		return o, fmt.Errorf("-mem-rounds %d: want at least 1", o.memRounds)
	case o.bursts < 1 || o.burstSize < 1 || o.burstSize > 200:
		return o, fmt.Errorf("-bursts %d -burst-size %d: want at least one burst of 1 to 200", o.bursts, o.burstSize)
	case o.settle < 0:
		return o, fmt.Errorf("-settle %v: want a duration of zero or more", o.settle)
	}
	var err error
	if o.shim, err = filepath.Abs(o.shim); err != nil {
		return o, fmt.Errorf("-shim: %w", err)
	}
	if fi, err := os.Stat(o.shim); err != nil || fi.Mode()&0o111 == 0 {
		return o, fmt.Errorf("-shim %s is not an executable (run make build)", o.shim)
	}
	if o.skeleton != "" {
		if o.skeleton, err = filepath.Abs(o.skeleton); err != nil {
			return o, fmt.Errorf("-skeleton: %w", err)
		}
		if fi, err := os.Stat(o.skeleton); err != nil || fi.Mode()&0o111 == 0 {
			return o, fmt.Errorf("-skeleton %s is not an executable (run make bench)", o.skeleton)
		}
	}
	if o.repo, err = filepath.Abs(o.repo); err != nil {
		return o, fmt.Errorf("-repo: %w", err)
	}
	return o, nil
}
