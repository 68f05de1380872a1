// SPDX-License-Identifier: Apache-2.0

// The shim command: the shim binary's start and delete actions and the Shutdown RPC, one at a
// time, which containerd runs only inside its task life cycle (core/runtime/v2 binary.go
// binary.Start and binary.Delete, shimTask.Shutdown in shim.go in containerd v2.4). ctr's shim
// command (cmd/ctr/commands/shim) talks to a running shim but never runs its actions.

package cli

import (
	"errors"
	"fmt"
	"os"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/spf13/cobra"
)

func shimCommand(g *globals) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "shim",
		Short: "Start, shut down and delete shims",
		Example: `  shimctl --shim bin/containerd-shim-step01-v2 shim start demo
  shimctl shim delete demo`,
	})
	cmd.AddCommand(&cobra.Command{
		Use:     "start ID",
		Short:   "Run the shim's start action for task ID, as containerd does",
		Example: "  shimctl --shim bin/containerd-shim-step01-v2 shim start demo",
		Args:    oneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.launcher()
			if err != nil {
				return err
			}
			id := args[0]
			if _, err := os.Stat(d.Bundle(id)); errors.Is(err, os.ErrNotExist) {
				if _, err := d.CreateBundle(id); err != nil {
					return err
				}
			}
			b, err := d.StartShim(cmd.Context(), id, nil)
			if err != nil {
				return err
			}
			pid, _ := os.ReadFile(d.Bundle(id) + "/shim.pid")
			fmt.Fprintf(cmd.OutOrStdout(), "shim for %s listens at %s (pid %s)\n", id, b.Address, pid)
			return nil
		},
	})
	cmd.AddCommand(onTask(g, &cobra.Command{
		Use:     "delete ID",
		Short:   "Run the shim's delete action for task ID and remove its bundle",
		Example: "  shimctl shim delete demo",
	}, func(cmd *cobra.Command, d *driver.Driver, id string) error {
		if _, err := os.Stat(d.Bundle(id)); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no task %q in namespace %q of %s", id, d.Namespace, d.State)
		}
		resp, err := d.DeleteShim(cmd.Context(), id)
		if err != nil {
			return err
		}
		if err := d.RemoveBundle(id); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "deleted %s: pid %d, exit status %d\n", id, resp.Pid, resp.ExitStatus)
		return nil
	}))
	cmd.AddCommand(callShim(g, "shutdown", &cobra.Command{
		Use:     "shutdown ID",
		Short:   "Ask the shim of task ID to exit (the Shutdown RPC)",
		Example: "  shimctl shim shutdown demo",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		// A shim may exit before its reply leaves, as the step shims do: a connection closed
		// under the call is a shutdown too (containerd's shim client reads it so as well).
		_, err := c.Task.Shutdown(cmd.Context(), &taskapi.ShutdownRequest{ID: id})
		if err != nil && !errors.Is(err, ttrpc.ErrClosed) {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "shim for %s is shutting down\n", id)
		return nil
	}))
	return cmd
}
