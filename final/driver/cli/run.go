// SPDX-License-Identifier: Apache-2.0

// The foreground run mirrors ctr's run command in containerd v2.4 cmd/ctr/commands/run
// (create, start, wait, signal proxy, --rm) and falls back to polling State for shims that have
// no Wait yet.

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
)

// outputGrace bounds how long run waits, after the exit, for the container's last output: a
// process that escaped the container with a copy of its stdout must not hold shimctl forever.
const outputGrace = 5 * time.Second

// pollInterval is how often run asks a shim without Wait for the task's state.
const pollInterval = 50 * time.Millisecond

// noWaitNote is printed once when the shim answers Wait with Unimplemented.
const noWaitNote = "note: this shim has no Wait (it arrives in step 05); exit status taken from State"

func runCommand(g *globals) *cobra.Command {
	var detach bool
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [-t] [-d [--log URI]] [--rm] [--rootfs DIR] [--runtime-binary RUNC] ID -- CMD [ARG...]",
		Short: "Create and start a task, show its output and exit with its status",
		Long: `run creates task ID running CMD (as "task create" does), starts it, copies its
stdout and stderr to shimctl's own through FIFOs, waits for it to exit and exits
with its status. The task then stays, STOPPED, for "task state" and "task
delete"; with --rm it is deleted, its shim stopped and its bundle removed.

SIGINT, SIGTERM and SIGHUP sent to shimctl are forwarded to the container's init
with Kill, as ctr does. The init is PID 1 of its namespace and ignores signals it
has no handler for: "task kill -s KILL ID" from another terminal always works.

With -t the container gets a terminal: shimctl's terminal is put in raw mode
(Ctrl-C and Ctrl-D go to the container), its size is sent with ResizePty after
Start and whenever it changes (SIGWINCH), and it is restored however run ends.

A shim without Wait (steps 03 and 04) is waited for by reading the output to its
end and then polling State until the task is STOPPED.

With -d, run creates and starts the task with null stdio, prints its pid and
returns; the task keeps running. --log sends its stdout and stderr to a URI
instead, as containerd does for a container's log: file:///PATH appends both to
PATH, binary:///PATH?ARGS runs PATH as a logging binary.

--runtime-binary sends containerd.runc.v1.Options{BinaryName} with Create: the
shim drives that OCI runtime (crun, for one) instead of runc.`,
		Example: `  shimctl --shim bin/containerd-shim-step04-v2 run --rm demo -- sh -c 'echo hello; exit 3'; echo $?
  shimctl run -t --rm shell -- sh
  shimctl run -d sleeper -- sleep 1000
  shimctl run -d --log file:///tmp/logged.txt logged -- sh -c 'echo hi'
  shimctl run --rm --runtime-binary crun demo -- uname -a`,
		Args: idAndCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			if detach && o.rm {
				return usageError{errors.New("run: -d and --rm do not go together (delete a detached task with task kill and task delete)")}
			}
			if detach && o.tty {
				return usageError{errors.New("run: -d and -t do not go together")}
			}
			if o.log != "" && !detach {
				return usageError{errors.New("run: --log needs -d (without it the output comes to shimctl)")}
			}
			d, err := g.launcher()
			if err != nil {
				return err
			}
			id, argv := args[0], args[1:]
			if detach {
				return runDetached(cmd, d, id, argv, o)
			}
			return runForeground(cmd, d, id, argv, o)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&detach, "detach", "d", false, "start the task with null stdio, print its pid and return")
	f.BoolVarP(&o.tty, "tty", "t", false, "give the container a terminal, in raw mode")
	f.BoolVar(&o.rm, "rm", false, "delete the task and its shim after it exits")
	f.StringVar(&o.rootfs, "rootfs", "", "root file system directory (default: a busybox rootfs in the state directory)")
	f.StringVar(&o.runtimeBinary, "runtime-binary", "", "OCI runtime the shim runs instead of runc (sent as runc options' BinaryName)")
	f.StringVar(&o.log, "log", "", "with -d: send stdout and stderr to URI (file:///PATH or binary:///PATH?ARGS)")
	return cmd
}

// runOptions are run's flags.
type runOptions struct {
	rootfs, runtimeBinary string
	log                   string // with -d: the URI stdout and stderr go to
	rm, tty               bool
}

func runDetached(cmd *cobra.Command, d *driver.Driver, id string, argv []string, o runOptions) error {
	ctx := cmd.Context()
	c, pid, err := createTaskWith(ctx, cmd.ErrOrStderr(), d, id, argv, createOptions{rootfs: o.rootfs, runtimeBinary: o.runtimeBinary, log: o.log})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Task.Start(ctx, &taskapi.StartRequest{ID: id}); err != nil {
		return startFailed(ctx, d, c, id, err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), pid)
	return nil
}

func runForeground(cmd *cobra.Command, d *driver.Driver, id string, argv []string, o runOptions) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	// Until Start is sent, the cancellation of ctx by the same signals aborts the run instead.
	signals := notifySignals()
	defer stopSignals(signals)

	stdio, err := openStdio(ctx, cmd, d, id, o.tty)
	if err != nil {
		return err
	}
	defer stdio.close()
	c, _, err := createTaskWith(ctx, stderr, d, id, argv, createOptions{
		rootfs: o.rootfs, fifos: stdio.fifos, terminal: o.tty, runtimeBinary: o.runtimeBinary})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := startUncut(ctx, c, id, ""); err != nil {
		return startFailed(ctx, d, c, id, err)
	}

	// From here the task runs, and every call must outlive the signals shimctl forwards.
	running := context.WithoutCancel(ctx)
	stdio.started(running, c, id, "")
	stopForwarding := make(chan struct{})
	var forwarder sync.WaitGroup
	forwarder.Add(1)
	go func() {
		// Owned by runForeground: ends when stopForwarding is closed, below.
		defer forwarder.Done()
		forwardSignals(running, c, id, signals, stopForwarding, stderr)
	}()
	status, err := waitExit(running, c, id, stdio.attached, stderr)
	close(stopForwarding)
	forwarder.Wait()
	if err != nil {
		return err
	}
	if o.rm {
		cleanup, cancel := context.WithTimeout(running, cleanupTimeout)
		defer cancel()
		if _, err := d.DeleteTask(cleanup, c, id); err != nil {
			return fmt.Errorf("the container exited with status %d, but removing it failed: %w", status, err)
		}
	}
	return statusExit(status)
}

// startUncut sends Start so that a signal arriving meanwhile does not cut it short: the
// process may run before the reply comes back, so the signal is the process's, and the caller's
// forwarder delivers it (signal.Notify keeps it queued) once Start has returned. cleanupTimeout
// bounds a Start that never answers.
func startUncut(ctx context.Context, c *driver.Conn, id, execID string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := c.Task.Start(ctx, &taskapi.StartRequest{ID: id, ExecID: execID})
	return err
}

// startFailed takes down a task whose Start failed and reports the failure.
func startFailed(ctx context.Context, d *driver.Driver, c *driver.Conn, id string, err error) error {
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return errors.Join(fmt.Errorf("start: %w", err), d.ForceDelete(cleanup, c, id))
}

// waitExit returns the exit status of the task once it has exited and its output has been
// copied. It uses Wait, or for a shim without it the end of the output and State.
func waitExit(ctx context.Context, c *driver.Conn, id string, attached *driver.Attached, notes io.Writer) (uint32, error) {
	resp, err := c.Task.Wait(ctx, &taskapi.WaitRequest{ID: id})
	switch {
	case err == nil:
		waitOutput(attached, outputGrace)
		return resp.ExitStatus, nil
	case driver.Code(err) != codes.Unimplemented:
		return 0, fmt.Errorf("wait: %w", err)
	}
	fmt.Fprintln(notes, noWaitNote)
	// The shim closes the FIFOs once the container's processes are gone: the exit is at hand.
	attached.Wait()
	st, err := driver.PollStopped(ctx, c, id, pollInterval)
	if err != nil {
		return 0, err
	}
	return st.ExitStatus, nil
}

// waitOutput waits up to grace for the copies of the task's output to end.
func waitOutput(attached *driver.Attached, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		// Owned by waitOutput's caller: attached.Close, deferred in runForeground, ends it.
		attached.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
	}
}

// forwardSignals sends every signal that arrives on signals to the task's init until stop is
// closed, as ctr's signal proxy does. A failure is reported, and does not end the run.
func forwardSignals(ctx context.Context, c *driver.Conn, id string, signals <-chan os.Signal, stop <-chan struct{}, notes io.Writer) {
	forwardSignalsTo(ctx, c, id, "", signals, stop, notes)
}

// forwardSignalsTo is forwardSignals to the exec execID, or with "" to the init.
func forwardSignalsTo(ctx context.Context, c *driver.Conn, id, execID string, signals <-chan os.Signal, stop <-chan struct{}, notes io.Writer) {
	for {
		select {
		case <-stop:
			return
		case s := <-signals:
			sig, ok := s.(syscall.Signal)
			if !ok {
				continue
			}
			_, err := c.Task.Kill(ctx, &taskapi.KillRequest{ID: id, ExecID: execID, Signal: uint32(sig)})
			if err != nil && driver.Code(err) != codes.NotFound {
				fmt.Fprintf(notes, "shimctl: forward %s: %s\n", sig, describe(err))
			}
		}
	}
}
