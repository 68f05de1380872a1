// SPDX-License-Identifier: Apache-2.0

// Package cli is shimctl's command tree: each command is a thin layer over package driver.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shimwalk/shimwalk/final/driver"
)

// Exit codes: a container's own status is passed through by run, exec and wait.
const (
	exitError = 1
	exitUsage = 2
)

type globals struct {
	state     string
	namespace string
	shim      string
	runtime   string
	debug     bool
	// taskShim is the shim binary of the task the command talks to, from its bundle.
	taskShim string
	// traceFile is --trace; tracing is what the command records there (see trace.go).
	traceFile string
	tracing   *tracing
}

// usageError marks errors in how shimctl was called, which exit with exitUsage.
type usageError struct{ error }

// exitCode carries a container's exit status out of a command; Main finds it however it was
// wrapped on the way (callShim names it after the call, as any error).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Main runs shimctl with args and returns its exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{}
	root := newRoot(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if terr := g.stopTracing(); terr != nil {
		err = errors.Join(err, terr)
	}
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	fmt.Fprintf(os.Stderr, "shimctl: %s\n", describeFor(g.shimName(), err))
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") ||
		strings.Contains(err.Error(), "flag") || strings.Contains(err.Error(), "arg(s)") {
		return exitUsage
	}
	return exitError
}

// describe renders an error as one line; an RPC the shim lacks is named as such rather than
// shown as a chain of wrapped transport errors.
func describe(err error) string {
	code := driver.Code(err)
	if code == codes.Unimplemented {
		return "this shim does not implement that call: " + driver.Message(err)
	}
	msg := err.Error()
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		// The shim's message says what went wrong; the transport's prefix only adds noise.
		msg = strings.Replace(msg, "rpc error: code = "+code.String()+" desc = ", "", 1)
	}
	return strings.ReplaceAll(msg, "\n", " ")
}

// newRoot is the command tree whose global flags fill g.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "shimctl",
		Short: "Play containerd's part towards a runtime-v2 shim",
		Long: `shimctl starts, drives and deletes runtime-v2 shims the way containerd does,
so that every step of shimwalk, and the final shim, can be run and watched by hand.`,
		Example: `  shimctl --shim bin/containerd-shim-step01-v2 shim start demo
  shimctl tree demo
  shimctl shim delete demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.state, "state", defaultState(), "state directory holding one bundle per task ($SHIMCTL_STATE sets the default)")
	pf.StringVarP(&g.namespace, "namespace", "n", "default", "namespace")
	pf.StringVar(&g.shim, "shim", "", "shim binary (default: containerd-shim-shimwalk-v2 beside shimctl or on PATH)")
	pf.StringVar(&g.runtime, "runtime", "", "runtime name, resolved like containerd: io.containerd.X.vN runs containerd-shim-X-vN from PATH")
	pf.BoolVar(&g.debug, "debug", false, "start shims with -debug")
	pf.StringVar(&g.traceFile, "trace", "", "append what the driver and the shim do to FILE, one JSON record a line (see shimctl trace)")
	root.PersistentPreRunE = g.startTracing
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(shimCommand(g), taskCommand(g), runCommand(g), eventsCommand(g), treeCommand(g), lsCommand(g))
	root.AddCommand(demoCommand(g), traceCommand())
	return root
}

// defaultState is $SHIMCTL_STATE, or /run/shimctl: an environment can keep every shimctl of a
// session (a test, a workshop seat) in a private state directory, as SHIMWALK_SOCKET_DIR does
// for the shims.
func defaultState() string {
	if s := os.Getenv("SHIMCTL_STATE"); s != "" {
		return s
	}
	return "/run/shimctl"
}

// reserved are the names the driver and shimctl use in the state directory beside the
// namespaces; a namespace of that name would mix its bundles with them.
var reserved = map[string]bool{"fifo": true, "rootfs": true, "driver.sock": true, "events.sock": true}

// driver builds the driver the global flags describe. Its Shim is empty when no shim binary can
// be found: only the commands that start a shim need one (see launcher).
func (g *globals) driver() (*driver.Driver, error) {
	state, err := filepath.Abs(g.state)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if err := driver.ValidateID("namespace", g.namespace); err != nil {
		return nil, usageError{err}
	}
	if reserved[g.namespace] {
		return nil, usageError{fmt.Errorf("namespace %q is reserved: shimctl keeps its own %s in the state directory", g.namespace, g.namespace)}
	}
	shim, _ := g.shimPath()
	d := driver.New(state, g.namespace, shim)
	d.Debug = g.debug
	if err := g.traceDriver(d); err != nil {
		return nil, err
	}
	return d, nil
}

// launcher is driver for the commands that start shims.
func (g *globals) launcher() (*driver.Driver, error) {
	if _, err := g.shimPath(); err != nil {
		return nil, err
	}
	return g.driver()
}

// connect dials the shim of task id, telling a task that does not exist from a shim that does
// not answer.
func connect(ctx context.Context, d *driver.Driver, id string) (*driver.Conn, error) {
	if _, err := os.Stat(d.Bundle(id)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no task %q in namespace %q of %s", id, d.Namespace, d.State)
	}
	c, err := d.Connect(ctx, id)
	if err != nil {
		return nil, shimGone{fmt.Errorf("the shim of %s does not answer: %w", id, err)}
	}
	return c, nil
}

// shimGone marks a task whose bundle exists but whose shim cannot be reached.
type shimGone struct{ error }

func (e shimGone) Unwrap() error { return e.error }

// onTask makes cmd a command on the one task its argument names: body runs with the driver
// the global flags describe.
func onTask(g *globals, cmd *cobra.Command, body func(cmd *cobra.Command, d *driver.Driver, id string) error) *cobra.Command {
	cmd.Args = oneID
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		d, err := g.driver()
		if err != nil {
			return err
		}
		return body(cmd, d, args[0])
	}
	return cmd
}

// callShim makes cmd a command on one task that calls the task's shim: body runs with a
// connection to it, and what body returns is named after the call (name: ...), so that every
// failed call says which call it was. Checks of flags that need no shim go in cmd's PreRunE.
func callShim(g *globals, name string, cmd *cobra.Command, body func(cmd *cobra.Command, c *driver.Conn, id string) error) *cobra.Command {
	return onTask(g, cmd, func(cmd *cobra.Command, d *driver.Driver, id string) error {
		g.noteShim(d, id)
		c, err := connect(cmd.Context(), d, id)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := body(cmd, c, id); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// group makes cmd a parent of subcommands. Bare, it prints its help; cobra would also print
// help, and exit 0, for an unknown subcommand, which is a usage error.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())}
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}

func (g *globals) shimPath() (string, error) {
	if g.shim != "" && g.runtime != "" {
		return "", usageError{errors.New("--shim and --runtime do not go together")}
	}
	if g.runtime != "" {
		return resolveRuntime(g.runtime)
	}
	if g.shim != "" {
		p, err := filepath.Abs(g.shim)
		if err != nil {
			return "", fmt.Errorf("shim path: %w", err)
		}
		return p, nil
	}
	const name = "containerd-shim-shimwalk-v2"
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", usageError{fmt.Errorf("no shim: pass --shim PATH (for example bin/containerd-shim-step01-v2)")}
}

// oneID is the argument rule of commands that take a task id.
func oneID(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("%s takes one task id", cmd.CommandPath())}
	}
	if err := driver.ValidateID("id", args[0]); err != nil {
		return usageError{err}
	}
	return nil
}

// noArgs is the argument rule of commands that take none.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

// idAndCommand is the argument rule of commands that take a task id and, after --, the
// container's command. The -- is required so that the command's own flags are never read as
// shimctl's.
func idAndCommand(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0:
		return usageError{fmt.Errorf("%s needs the container's command after --: %s", cmd.CommandPath(), cmd.UseLine())}
	case dash != 1:
		return usageError{fmt.Errorf("%s takes one task id before --, got %q", cmd.CommandPath(), args[:dash])}
	case len(args) == dash:
		return usageError{fmt.Errorf("%s: no command after --", cmd.CommandPath())}
	}
	if err := driver.ValidateID("id", args[0]); err != nil {
		return usageError{err}
	}
	return nil
}
