// SPDX-License-Identifier: Apache-2.0

// --trace and the trace command: what the driver and the shim did, recorded by every command
// and drawn afterwards. containerd has nothing like it; its nearest relatives are the debug
// logs of core/runtime/v2 and `ctr events`.

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shimwalk/shimwalk/final/driver"
)

// tracing is what --trace records for one invocation of shimctl.
type tracing struct {
	file  *driver.TraceFile
	trace *driver.Trace
	// listen is whether the command may serve the events service itself, so that the events
	// shims forward while it runs are recorded; `shimctl events` serves it anyway.
	listen bool

	events *driver.EventServer
	stop   context.CancelFunc // ends the goroutine reading events
	done   chan struct{}      // closed when that goroutine returned
	seen   int                // events it recorded; read only after done is closed
}

// startTracing opens the trace file of --trace and records which command runs. It is the
// root's PersistentPreRunE: flags are parsed by then.
func (g *globals) startTracing(cmd *cobra.Command, args []string) error {
	if g.traceFile == "" {
		return nil
	}
	for c := cmd; c != nil; c = c.Parent() {
		if c.Name() == "trace" && c.Parent() != nil && c.Parent().Parent() == nil {
			return usageError{errors.New("--trace does not go with the trace command: it would read the file it appends to")}
		}
	}
	f, err := driver.OpenTraceFile(g.traceFile)
	if err != nil {
		return err
	}
	g.tracing = &tracing{file: f, trace: f.Trace(nil), listen: cmd.Name() != "events"}
	g.tracing.trace.Add(driver.Record{Kind: driver.KindCommand, Name: cmd.CommandPath(), Args: commandLine(cmd, args)})
	return nil
}

// commandLine is how cmd was called, without the global flags: its own flags that were set,
// then args, with the -- that cobra took out put back.
func commandLine(cmd *cobra.Command, args []string) []string {
	var line []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if cmd.InheritedFlags().Lookup(f.Name) != nil {
			return
		}
		if f.Value.Type() == "bool" && f.Value.String() == "true" {
			line = append(line, "--"+f.Name)
			return
		}
		line = append(line, "--"+f.Name, f.Value.String())
	})
	if dash := cmd.ArgsLenAtDash(); dash >= 0 && dash <= len(args) {
		return slices.Concat(line, args[:dash], []string{"--"}, args[dash:])
	}
	return append(line, args...)
}

// trace is the trace of this invocation, or nil (which records nothing) without --trace.
func (g *globals) trace() *driver.Trace {
	if g.tracing == nil {
		return nil
	}
	return g.tracing.trace
}

// traceDriver makes d record into the trace and, when nobody serves d's events service yet,
// serves it until shimctl ends, recording each event: containerd always listens, and a shim
// whose events go nowhere behaves differently (it retries, then drops them).
func (g *globals) traceDriver(d *driver.Driver) error {
	t := g.tracing
	if t == nil {
		return nil
	}
	d.Trace = t.trace
	// A step shim appends its own trace points to the same file; it runs in the bundle, so the
	// path must not be relative.
	if abs, err := filepath.Abs(g.traceFile); err == nil {
		d.Env = append(d.Env, driver.TraceEnv+"="+abs)
	}
	if !t.listen || t.events != nil || driver.Listening(d.TTRPCAddress) {
		return nil
	}
	srv, err := driver.ListenEvents(d.TTRPCAddress)
	if err != nil {
		return fmt.Errorf("trace: serve events: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.events, t.stop, t.done = srv, cancel, make(chan struct{})
	go func() {
		// Owned by t: stopTracing cancels ctx and waits for done.
		defer close(t.done)
		for ; ; t.seen++ {
			e, err := srv.Next(ctx, t.seen)
			if err != nil {
				return
			}
			t.trace.Event(e)
		}
	}()
	return nil
}

// stopTracing stops serving events, records those that arrived last, and closes the trace
// file. It runs however the command ended.
func (g *globals) stopTracing() error {
	t := g.tracing
	if t == nil {
		return nil
	}
	g.tracing = nil
	var errs []error
	if t.events != nil {
		t.stop()
		<-t.done
		errs = append(errs, t.events.Close())
		for _, e := range t.events.Events()[t.seen:] {
			t.trace.Event(e)
		}
	}
	errs = append(errs, t.file.Close())
	return errors.Join(errs...)
}

func traceCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "trace",
		Short: "Show what --trace recorded",
		Long: `Every shimctl command given --trace FILE appends to FILE what the driver and the
shim did, one JSON object a line: the command itself ("command"), each run of
the shim binary with its command line, duration and bootstrap reply ("exec"),
each Task RPC with its duration and status code ("rpc"), each event the shim
forwarded ("event") and each exit that Wait or a TaskExit event reported
("exit"). A step shim adds its own trace points ("point": the start helper's
re-exec, the reaper's routing of an exit) to FILE, which shimctl names to it
in SHIMWALK_TRACE; shimctl adds one where it reads bootstrap.json. While it runs, a traced command serves the events service itself
when no "shimctl events" does. Times are wall-clock ("time"), so the commands
of one experiment add up to one trace.`,
		Example: `  shimctl --trace run.jsonl --shim bin/containerd-shim-step05-v2 run --rm demo -- /bin/sh -c 'echo hi; exit 3'
  shimctl trace mermaid run.jsonl`,
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "mermaid FILE",
		Short: "Draw a trace file as a Mermaid sequence diagram",
		Long: `mermaid prints the records of FILE as a Mermaid sequenceDiagram between shimctl
(in containerd's place), the shim and the container, in the order they
happened. Each command opens with a note; calls show their status and
duration, events arrive as asynchronous messages.`,
		Example: "  shimctl trace mermaid run.jsonl > run.mmd",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("%s takes one trace file", cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("trace: %w", err)
			}
			defer f.Close()
			records, err := driver.ReadTrace(f, args[0])
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), driver.Mermaid(records))
			return nil
		},
	})
	return cmd
}
