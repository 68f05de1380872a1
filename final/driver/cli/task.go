// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/spf13/cobra"

	"github.com/shimwalk/shimwalk/final/driver"
)

func taskCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "Call the shim's Task service"}
	cmd.AddCommand(&cobra.Command{
		Use:     "connect ID",
		Short:   "Call Connect: the shim's pid and version",
		Example: "  shimctl task connect demo",
		Args:    oneID,
		RunE: withConn(g, func(cmd *cobra.Command, c *driver.Conn, id string) error {
			resp, err := c.Task.Connect(cmd.Context(), &taskapi.ConnectRequest{ID: id})
			if err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shim pid %d, task pid %d, version %q\n", resp.ShimPid, resp.TaskPid, resp.Version)
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:     "state ID",
		Short:   "Call State: the task's status, pid and exit",
		Example: "  shimctl task state demo",
		Args:    oneID,
		RunE: withConn(g, func(cmd *cobra.Command, c *driver.Conn, id string) error {
			resp, err := c.Task.State(cmd.Context(), &taskapi.StateRequest{ID: id})
			if err != nil {
				return fmt.Errorf("state: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s pid %d exit %d bundle %s\n", resp.ID, resp.Status, resp.Pid, resp.ExitStatus, resp.Bundle)
			return nil
		}),
	})
	return cmd
}

// withConn wraps a command body that needs a connection to the shim of its one id argument.
func withConn(g *globals, body func(*cobra.Command, *driver.Conn, string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		d, err := g.driver()
		if err != nil {
			return err
		}
		c, err := d.Connect(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		return body(cmd, c, args[0])
	}
}
