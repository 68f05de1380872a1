// SPDX-License-Identifier: Apache-2.0

// The task command: one Task RPC a subcommand (connect, state, start, kill, wait), with create
// and delete doing what containerd does around theirs. Mirrors ctr's task commands in
// containerd v2.4 cmd/ctr/commands/tasks (kill.go's signal names, delete.go) but calls the shim
// directly instead of containerd's Tasks service.

package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/driver"
)

func taskCommand(g *globals) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "task",
		Short: "Call the shim's Task service",
		Example: `  shimctl --shim bin/containerd-shim-step04-v2 task create demo -- sleep 100
  shimctl task start demo
  shimctl task kill -s KILL demo
  shimctl task delete demo`,
	})
	cmd.AddCommand(callShim(g, "connect", &cobra.Command{
		Use:     "connect ID",
		Short:   "Call Connect: the shim's pid and version",
		Example: "  shimctl task connect demo",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		resp, err := c.Task.Connect(cmd.Context(), &taskapi.ConnectRequest{ID: id})
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "shim pid %d, task pid %d, version %q\n", resp.ShimPid, resp.TaskPid, resp.Version)
		return nil
	}))
	cmd.AddCommand(callShim(g, "state", &cobra.Command{
		Use:     "state ID",
		Short:   "Call State: the task's status, pid and exit",
		Example: "  shimctl task state demo",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		resp, err := c.Task.State(cmd.Context(), &taskapi.StateRequest{ID: id})
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s pid %d exit %d bundle %s\n", resp.ID, resp.Status, resp.Pid, resp.ExitStatus, resp.Bundle)
		return nil
	}))
	cmd.AddCommand(taskCreateCommand(g), taskStartCommand(g), taskKillCommand(g),
		taskDeleteCommand(g), taskWaitCommand(g), taskExecCommand(g), taskPsCommand(g),
		taskPauseCommand(g), taskResumeCommand(g), taskStatsCommand(g), taskUpdateCommand(g),
		taskCheckpointCommand(g))
	return cmd
}

func taskCreateCommand(g *globals) *cobra.Command {
	var rootfs string
	nullIO := true
	cmd := &cobra.Command{
		Use:   "create [--rootfs DIR] [--null-io] ID -- CMD [ARG...]",
		Short: "Make a bundle, start its shim and Create the task; print the init pid",
		Long: `create does what containerd does for a new task: it writes a bundle (config.json
from a default spec running CMD), runs the shim's start action, and sends Create.
It prints the pid of the container's init, which waits for "task start".

The task's stdio is always null: shimctl exits after Create, and nobody would be
left to read FIFOs, so a container writing to them would block once the pipes
fill. --null-io is accepted for ctr's sake; use "shimctl run" to see output.

Without --rootfs the container's root is a busybox rootfs that shimctl builds
once in STATE/rootfs from the host's static busybox. Either way it is read-only;
/tmp is a tmpfs.`,
		Example: `  shimctl --shim bin/containerd-shim-step03-v2 task create demo -- sleep 100
  shimctl task create --rootfs /srv/rootfs web -- /bin/httpd -f`,
		Args: idAndCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !nullIO {
				return usageError{errors.New("task create always uses null stdio: shimctl would not be there to read FIFOs (use shimctl run)")}
			}
			d, err := g.launcher()
			if err != nil {
				return err
			}
			c, pid, err := createTask(cmd.Context(), cmd.ErrOrStderr(), d, args[0], args[1:], rootfs, nil)
			if err != nil {
				return err
			}
			c.Close()
			fmt.Fprintln(cmd.OutOrStdout(), pid)
			return nil
		},
	}
	cmd.Flags().StringVar(&rootfs, "rootfs", "", "root file system directory (default: a busybox rootfs in the state directory)")
	cmd.Flags().BoolVar(&nullIO, "null-io", true, "send no stdio to the shim (the only choice for create)")
	return cmd
}

func taskStartCommand(g *globals) *cobra.Command {
	return callShim(g, "start", &cobra.Command{
		Use:     "start ID",
		Short:   "Call Start: run the created task's command; print its pid",
		Example: "  shimctl task start demo",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		resp, err := c.Task.Start(cmd.Context(), &taskapi.StartRequest{ID: id})
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), resp.Pid)
		return nil
	})
}

func taskKillCommand(g *globals) *cobra.Command {
	var signal, execID string
	var all bool
	var sig uint32
	cmd := callShim(g, "kill", &cobra.Command{
		Use:   "kill [-s SIGNAL] [--all] [--exec-id EXEC] ID",
		Short: "Call Kill: send a signal to the task's init, with --all to all its processes, or to an exec",
		Long: `kill sends SIGNAL (a number, or a name such as KILL, SIGTERM or term; default
TERM) through the shim. The container's init is PID 1 of its namespace: it
ignores every signal it has no handler for, SIGKILL excepted. --exec-id sends it
to that exec's process instead.`,
		Example: `  shimctl task kill demo
  shimctl task kill -s KILL --all demo
  shimctl task kill --exec-id bg demo`,
		PreRunE: func(*cobra.Command, []string) error {
			var err error
			if sig, err = parseSignal(signal); err != nil {
				return usageError{err}
			}
			if all && execID != "" {
				return usageError{errors.New("kill: --all and --exec-id do not go together")}
			}
			return nil
		},
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		_, err := c.Task.Kill(cmd.Context(), &taskapi.KillRequest{ID: id, ExecID: execID, Signal: sig, All: all})
		return err
	})
	cmd.Flags().StringVarP(&signal, "signal", "s", "TERM", "signal, by number or name")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "signal every process of the task")
	cmd.Flags().StringVar(&execID, "exec-id", "", "signal this exec's process instead of the init")
	return cmd
}

func taskDeleteCommand(g *globals) *cobra.Command {
	return onTask(g, &cobra.Command{
		Use:   "delete ID",
		Short: "Call Delete, then Shutdown, then the shim's delete action; remove the bundle",
		Long: `delete removes a stopped (or never started) task the way containerd does after
"ctr task delete": the Delete RPC, whose pid and exit status it prints, then the
Shutdown RPC, then the shim binary's delete action, then the bundle. A running
task is refused: kill it first. When the shim no longer answers, delete runs the
shim's delete action and removes the bundle, as containerd does for a dead shim.`,
		Example: "  shimctl task delete demo",
	}, func(cmd *cobra.Command, d *driver.Driver, id string) error {
		ctx, out := cmd.Context(), cmd.OutOrStdout()
		c, err := connect(ctx, d, id)
		var gone shimGone
		if errors.As(err, &gone) {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: %v; running its delete action\n", err)
			resp, err := d.DeleteShim(ctx, id)
			if err != nil {
				return err
			}
			if err := d.RemoveBundle(id); err != nil {
				return err
			}
			fmt.Fprintf(out, "deleted %s: the shim's delete action reports exit status %d\n", id, resp.ExitStatus)
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := d.DeleteTask(ctx, c, id)
		if resp != nil {
			fmt.Fprintf(out, "deleted %s: pid %d, exit status %d\n", id, resp.Pid, resp.ExitStatus)
		}
		return err
	})
}

func taskWaitCommand(g *globals) *cobra.Command {
	return callShim(g, "wait", &cobra.Command{
		Use:   "wait ID",
		Short: "Call Wait: block until the task exits; exit with its status",
		Long: `wait blocks until the task's init has exited, prints "exit status N at TIME"
on stdout and exits with N. A shim before step 05 has no Wait: that is an error.`,
		Example: "  shimctl task wait demo; echo $?",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		resp, err := c.Task.Wait(cmd.Context(), &taskapi.WaitRequest{ID: id})
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "exit status %d at %s\n", resp.ExitStatus, formatTime(resp.ExitedAt))
		return statusExit(resp.ExitStatus)
	})
}

// parseSignal reads a signal as a number (1-64) or a name, with or without SIG, in any case.
func parseSignal(s string) (uint32, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("signal %d is out of range 1-64", n)
		}
		return uint32(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return uint32(sig), nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

// statusExit is the error that makes shimctl exit with a container's status. Statuses are
// 0-255 in practice; anything larger would wrap to a misleading exit code, so it is capped.
func statusExit(status uint32) error {
	if status > 255 {
		status = 255
	}
	return exitCode(status)
}

func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "an unknown time"
	}
	return ts.AsTime().Local().Format(time.RFC3339Nano)
}
