// SPDX-License-Identifier: Apache-2.0

// The tree command: a task's shim and every process below it, from /proc, to show who is whose
// parent at each step. Not a mirror of any containerd function: ctr task ps lists a
// container's pids, not the shim's.

package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

func treeCommand(g *globals) *cobra.Command {
	return onTask(g, &cobra.Command{
		Use:   "tree ID",
		Short: "Show the process tree of task ID's shim, with pid, ppid, pgid and sid",
		Long: `tree prints the shim of task ID and every process below it. Compare the ppid
column with the shim's pid to see who is whose parent: from step 04 on, the
container's init is the shim's child; before that it is re-parented elsewhere.`,
		Example: "  shimctl tree demo",
	}, func(cmd *cobra.Command, d *driver.Driver, id string) error {
		dir := d.Bundle(id)
		shimPid, err := bundle.ReadPidFile(filepath.Join(dir, bundle.ShimPidFile))
		if err != nil {
			return fmt.Errorf("no shim recorded for %s: %w", id, err)
		}
		roots := []int{shimPid}
		// A container that is not the shim's child (steps 01-03) is shown as a second root.
		if initPid, err := bundle.ReadPidFile(filepath.Join(dir, bundle.InitPidFile)); err == nil {
			if p, err := driver.ReadProc(initPid); err == nil && p.PPid != shimPid {
				roots = append(roots, initPid)
			}
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "%7s %7s %7s %7s  %s\n", "PID", "PPID", "PGID", "SID", "COMMAND")
		for _, pid := range roots {
			printTree(out, pid, 0)
		}
		return nil
	})
}

func printTree(out interface{ Write([]byte) (int, error) }, pid, depth int) {
	p, err := driver.ReadProc(pid)
	if err != nil {
		return
	}
	fmt.Fprintf(out, "%7d %7d %7d %7d  %s%s\n", p.Pid, p.PPid, p.Pgid, p.Sid, strings.Repeat("  ", depth), p.Command)
	for _, child := range p.Children {
		printTree(out, child, depth+1)
	}
}
