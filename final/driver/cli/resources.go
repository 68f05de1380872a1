// SPDX-License-Identifier: Apache-2.0

// A task's resources: stats, update and checkpoint, as ctr's task metrics, update and
// checkpoint commands in containerd v2.4 cmd/ctr/commands/tasks send them.

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/driver"
)

// resourcesURL is the type url containerd gives LinuxResources (JSON in an Any) in Update.
const resourcesURL = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources"

// cpuPeriod is the CFS period update uses for --cpus, as docker and nerdctl do.
const cpuPeriod = 100000

func taskStatsCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := callShim(g, "stats", &cobra.Command{
		Use:   "stats [--json] TASK",
		Short: "Call Stats: the task's cgroup metrics (memory, pids, cpu)",
		Long: `stats shows the memory usage and limit, the number of processes and their limit,
and the cpu time used of the task's cgroup, from the cgroups v1 or v2 metrics the
shim returns. --json prints those metrics as they are, in protobuf's JSON form.`,
		Example: "  shimctl task stats demo\n  shimctl task stats --json demo | jq .memory",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		resp, err := c.Task.Stats(cmd.Context(), &taskapi.StatsRequest{ID: id})
		if err != nil {
			return err
		}
		if resp.Stats == nil {
			return errors.New("the shim sent no metrics")
		}
		v, err := typeurl.UnmarshalAny(resp.Stats)
		if err != nil {
			return fmt.Errorf("metrics of type %q: %w", resp.Stats.GetTypeUrl(), err)
		}
		out := cmd.OutOrStdout()
		if asJSON {
			m, ok := v.(proto.Message)
			if !ok {
				return fmt.Errorf("metrics of type %q are not a protobuf message", resp.Stats.GetTypeUrl())
			}
			data, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, string(data))
			return nil
		}
		var memUsage, memLimit, pids, pidsLimit uint64
		var cpu time.Duration
		switch m := v.(type) {
		case *v1.Metrics:
			memUsage, memLimit = m.GetMemory().GetUsage().GetUsage(), m.GetMemory().GetUsage().GetLimit()
			pids, pidsLimit = m.GetPids().GetCurrent(), m.GetPids().GetLimit()
			cpu = time.Duration(m.GetCPU().GetUsage().GetTotal())
		case *v2.Metrics:
			memUsage, memLimit = m.GetMemory().GetUsage(), m.GetMemory().GetUsageLimit()
			pids, pidsLimit = m.GetPids().GetCurrent(), m.GetPids().GetLimit()
			cpu = time.Duration(m.GetCPU().GetUsageUsec()) * time.Microsecond
		default:
			return fmt.Errorf("unknown metrics type %q (try --json)", resp.Stats.GetTypeUrl())
		}
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "memory\t%s\tlimit %s\n", bytesSize(memUsage), limit(memLimit, bytesSize))
		fmt.Fprintf(w, "pids\t%d\tlimit %s\n", pids, limit(pidsLimit, func(n uint64) string { return strconv.FormatUint(n, 10) }))
		fmt.Fprintf(w, "cpu\t%s\n", cpu.Round(time.Microsecond))
		return w.Flush()
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw metrics as JSON")
	return cmd
}

// limit renders a cgroup limit, of which 0 and the huge "max" values mean none.
func limit(n uint64, format func(uint64) string) string {
	if n == 0 || n >= math.MaxInt64/4096*4096 {
		return "none"
	}
	return format(n)
}

// bytesSize renders n bytes in binary units.
func bytesSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// parseSize reads a byte count: a number, optionally followed by k, m, g or t (powers of
// 1024, with or without a trailing b, in any case).
func parseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), "b")
	mult := int64(1)
	if t != "" {
		if i := strings.IndexByte("kmgt", t[len(t)-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is not a positive number of bytes (like 67108864 or 64m)", s)
	}
	return n * mult, nil
}

func taskUpdateCommand(g *globals) *cobra.Command {
	var memory string
	var cpus float64
	var value []byte
	cmd := callShim(g, "update", &cobra.Command{
		Use:   "update [--memory SIZE] [--cpus N] TASK",
		Short: "Call Update: change the task's memory limit or cpu quota",
		Long: `update sends new limits as the OCI LinuxResources JSON that containerd sends,
and the shim applies them with "runc update". --memory takes bytes or a size
like 64m or 1g; --cpus takes a number of cpus, made a CFS quota over a period of
100ms (--cpus 0.5: 50ms of cpu every 100ms).`,
		Example: "  shimctl task update --memory 64m demo\n  shimctl task update --cpus 0.5 demo",
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			var res specs.LinuxResources
			if cmd.Flags().Changed("memory") {
				n, err := parseSize(memory)
				if err != nil {
					return usageError{err}
				}
				res.Memory = &specs.LinuxMemory{Limit: &n}
			}
			if cmd.Flags().Changed("cpus") {
				if cpus <= 0 || cpus > 1<<20 {
					return usageError{fmt.Errorf("--cpus %v: want a positive number of cpus", cpus)}
				}
				quota, period := int64(cpus*cpuPeriod), uint64(cpuPeriod)
				res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
			}
			if res.Memory == nil && res.CPU == nil {
				return usageError{errors.New("update: give --memory or --cpus")}
			}
			var err error
			if value, err = json.Marshal(&res); err != nil {
				return fmt.Errorf("encode resources: %w", err)
			}
			return nil
		},
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		req := &taskapi.UpdateTaskRequest{ID: id, Resources: &anypb.Any{TypeUrl: resourcesURL, Value: value}}
		_, err := c.Task.Update(cmd.Context(), req)
		return err
	})
	cmd.Flags().StringVar(&memory, "memory", "", "memory limit: bytes, or a size like 64m")
	cmd.Flags().Float64Var(&cpus, "cpus", 0, "cpu quota, in cpus (0.5, 2)")
	return cmd
}

func taskCheckpointCommand(g *globals) *cobra.Command {
	var image, path string // path: image, made absolute
	var exit bool
	var opts *anypb.Any
	cmd := callShim(g, "checkpoint", &cobra.Command{
		Use:   "checkpoint --image-path DIR [--exit] TASK",
		Short: "Call Checkpoint: dump the task with CRIU into DIR",
		Long: `checkpoint asks the shim to dump the running task with "runc checkpoint", which
needs CRIU, into the directory DIR; with --exit the task stops once dumped, and
otherwise keeps running. When CRIU fails, its error is shown as one line and the
task keeps running.`,
		Example: "  shimctl task checkpoint --image-path /tmp/cp demo",
		PreRunE: func(*cobra.Command, []string) error {
			if image == "" {
				return usageError{errors.New("checkpoint needs --image-path DIR")}
			}
			var err error
			if path, err = filepath.Abs(image); err != nil {
				return usageError{err}
			}
			if opts, err = typeurl.MarshalAnyToProto(&options.CheckpointOptions{Exit: exit, ImagePath: path}); err != nil {
				return fmt.Errorf("encode checkpoint options: %w", err)
			}
			return nil
		},
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		req := &taskapi.CheckpointTaskRequest{ID: id, Path: path, Options: opts}
		if _, err := c.Task.Checkpoint(cmd.Context(), req); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "checkpointed %s into %s\n", id, path)
		return nil
	})
	cmd.Flags().StringVar(&image, "image-path", "", "directory CRIU writes the images to")
	cmd.Flags().BoolVar(&exit, "exit", false, "stop the task once it is dumped")
	return cmd
}
