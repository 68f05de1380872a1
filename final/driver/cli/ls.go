// SPDX-License-Identifier: Apache-2.0

// The ls command is what containerd does for its tasks when it starts again (core/runtime/v2
// loadShims in containerd v2.4), on demand, followed by a table as `ctr task ls` prints it;
// unlike containerd it lists the dead shims it cleaned up, with the exit their delete reported.

package cli

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shimwalk/shimwalk/final/driver"
)

func lsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "Reconnect to the shim of every task, list the tasks, clean up after dead shims",
		Long: `ls walks the bundles of the namespace as containerd does when it starts again: it
reaches each shim at the address its bundle records (bootstrap.json, or the older
address file) and confirms it with the Connect and State RPCs. A bundle whose shim
is dead is cleaned up: ls runs that shim binary's delete action, which removes the
container and reports the exit it can recover (from exit.json, or 137), and
removes the bundle; such a task is listed once more, as DELETED.

The table shows the task's id, the shim's pid, the container's init pid, the
status, and the exit status and time once the task has exited. A task ls fails on
(a shim that answers but not as it should, a delete action that fails) is reported
on stderr, one line each, after the table, and ls then exits 1; the other tasks
are still listed.

A shim outlives the driver that started it: kill "shimctl events" or any other
shimctl while a container runs, and ls finds it RUNNING. From step 06 on, an exit
that happens while no driver runs is kept as well: in the bundle's exit.json,
which the delete action reports, and as a TaskExit event the shim forwards once
"shimctl events" runs again.

Like containerd's walk, which runs before containerd takes any request, ls takes
a bundle without a shim for one whose shim died: do not run it while another
shimctl is creating a task in the same state directory.`,
		Example: `  shimctl --shim bin/containerd-shim-step06-v2 run -d demo -- sleep 100
  shimctl ls`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.driver()
			if err != nil {
				return err
			}
			infos, err := d.Reconnect(cmd.Context())
			// Reconnect joins the failures of single bundles; any other error means that
			// nothing could be listed.
			var joined interface{ Unwrap() []error }
			if err != nil && !errors.As(err, &joined) {
				return err
			}
			printTasks(cmd, infos)
			if err == nil {
				return nil
			}
			for _, e := range joined.Unwrap() {
				fmt.Fprintf(cmd.ErrOrStderr(), "shimctl: %s\n", describe(e))
			}
			// Already reported, line by line: only the exit code is left to pass on.
			return exitCode(exitError)
		},
	}
}

// printTasks prints infos as a table. A pid or exit that is not known is shown as "-", never
// as 0: a running task's exit status of 0 would read as an exit.
func printTasks(cmd *cobra.Command, infos []driver.TaskInfo) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSHIM PID\tTASK PID\tSTATUS\tEXIT")
	for _, t := range infos {
		exit := "-"
		if t.Status == "STOPPED" || t.Status == "DELETED" {
			exit = strconv.FormatUint(uint64(t.ExitStatus), 10)
			if !t.ExitedAt.IsZero() {
				exit += " at " + t.ExitedAt.Local().Format(time.RFC3339Nano)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.ID, pidOrDash(t.ShimPid), pidOrDash(t.TaskPid), t.Status, exit)
	}
	// A tabwriter only fails when its writer does, and stdout has nowhere to report that.
	_ = w.Flush()
}

func pidOrDash(pid int) string {
	if pid <= 0 {
		return "-"
	}
	return strconv.Itoa(pid)
}
