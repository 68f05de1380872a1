// SPDX-License-Identifier: Apache-2.0

// Processes of a running task: exec mirrors ctr's task exec in containerd v2.4
// cmd/ctr/commands/tasks/exec.go (the container's process spec with new args, Exec, Start,
// Wait, then Delete of the exec); ps, pause and resume are one RPC each.

package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// processSpecURL is the type url containerd gives an exec's process spec (JSON in an Any).
const processSpecURL = "types.containerd.io/opencontainers/runtime-spec/1/Process"

func taskExecCommand(g *globals) *cobra.Command {
	var tty, detach bool
	var execID string
	cmd := &cobra.Command{
		Use:   "exec [-t] [-d] [--exec-id ID] TASK -- CMD [ARG...]",
		Short: "Run another process in a running task: Exec, Start, Wait",
		Long: `exec adds a process running CMD to the running task TASK, with the container's
own process spec (environment, user, capabilities) and new arguments, starts it,
copies its output through FIFOs, waits for it and exits with its status; the exec
is then deleted from the shim.

With -t the process gets a terminal: shimctl's terminal is put in raw mode,
window-size changes are forwarded with ResizePty, and the terminal is restored
however exec ends. With -d the process gets null stdio, exec prints its pid and
returns; the exec stays in the shim ("task ps" names it) until the task is deleted.`,
		Example: `  shimctl task exec demo -- ps
  shimctl task exec -t demo -- sh
  shimctl task exec -d --exec-id bg demo -- sleep 100`,
		Args: idAndCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			if detach && tty {
				return usageError{errors.New("exec: -d and -t do not go together")}
			}
			if execID == "" {
				execID = randomExecID()
			}
			if err := driver.ValidateID("exec id", execID); err != nil {
				return usageError{err}
			}
			d, err := g.driver()
			if err != nil {
				return err
			}
			id, argv := args[0], args[1:]
			g.noteShim(d, id)
			c, err := connect(cmd.Context(), d, id)
			if err != nil {
				return err
			}
			defer c.Close()
			spec, err := execSpec(d.Bundle(id), argv, tty)
			if err != nil {
				return err
			}
			if detach {
				return execDetached(cmd, c, id, execID, spec)
			}
			return execForeground(cmd, d, c, id, execID, spec, tty)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&tty, "tty", "t", false, "give the process a terminal, in raw mode")
	f.BoolVarP(&detach, "detach", "d", false, "start the process with null stdio, print its pid and return")
	f.StringVar(&execID, "exec-id", "", "the exec's id (default: a random one)")
	return cmd
}

func randomExecID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "exec-" + hex.EncodeToString(b)
}

// execSpec is the container's process spec from its bundle, running argv instead.
func execSpec(dir string, argv []string, tty bool) (*anypb.Any, error) {
	data, err := os.ReadFile(filepath.Join(dir, bundle.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("read the task's spec: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil || spec.Process == nil {
		return nil, fmt.Errorf("the task's config.json has no process spec: %v", err)
	}
	p := *spec.Process
	p.Args, p.Terminal = argv, tty
	if tty {
		p.Env = append(append([]string(nil), p.Env...), "TERM=xterm")
	}
	value, err := json.Marshal(&p)
	if err != nil {
		return nil, fmt.Errorf("encode process spec: %w", err)
	}
	return &anypb.Any{TypeUrl: processSpecURL, Value: value}, nil
}

func execDetached(cmd *cobra.Command, c *driver.Conn, id, execID string, spec *anypb.Any) error {
	ctx := cmd.Context()
	if _, err := c.Task.Exec(ctx, &taskapi.ExecProcessRequest{ID: id, ExecID: execID, Spec: spec}); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	resp, err := c.Task.Start(ctx, &taskapi.StartRequest{ID: id, ExecID: execID})
	if err != nil {
		return errors.Join(fmt.Errorf("start exec %s: %w", execID, err), deleteExec(ctx, c, id, execID))
	}
	fmt.Fprintln(cmd.OutOrStdout(), resp.Pid)
	return nil
}

func execForeground(cmd *cobra.Command, d *driver.Driver, c *driver.Conn, id, execID string, spec *anypb.Any, tty bool) error {
	ctx := cmd.Context()
	signals := notifySignals()
	defer stopSignals(signals)
	io, err := openStdio(ctx, cmd, d, id, tty)
	if err != nil {
		return err
	}
	defer io.close()
	req := &taskapi.ExecProcessRequest{ID: id, ExecID: execID, Spec: spec, Terminal: tty,
		Stdin: io.fifos.Stdin, Stdout: io.fifos.Stdout, Stderr: io.fifos.Stderr}
	if _, err := c.Task.Exec(ctx, req); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if err := startUncut(ctx, c, id, execID); err != nil {
		return errors.Join(fmt.Errorf("start exec %s: %w", execID, err), deleteExec(ctx, c, id, execID))
	}
	running := context.WithoutCancel(ctx)
	io.started(running, c, id, execID)
	stop := make(chan struct{})
	var forwarder sync.WaitGroup
	forwarder.Add(1)
	go func() {
		// Owned by execForeground: ends when stop is closed, below.
		defer forwarder.Done()
		forwardSignalsTo(running, c, id, execID, signals, stop, cmd.ErrOrStderr())
	}()
	resp, err := c.Task.Wait(running, &taskapi.WaitRequest{ID: id, ExecID: execID})
	close(stop)
	forwarder.Wait()
	if err != nil {
		return fmt.Errorf("wait for exec %s: %w", execID, err)
	}
	waitOutput(io.attached, outputGrace)
	if err := deleteExec(running, c, id, execID); err != nil {
		return err
	}
	return statusExit(resp.ExitStatus)
}

func deleteExec(ctx context.Context, c *driver.Conn, id, execID string) error {
	if _, err := c.Task.Delete(context.WithoutCancel(ctx), &taskapi.DeleteRequest{ID: id, ExecID: execID}); err != nil {
		return fmt.Errorf("delete exec %s: %w", execID, err)
	}
	return nil
}

func taskPsCommand(g *globals) *cobra.Command {
	return callShim(g, "pids", &cobra.Command{
		Use:   "ps TASK",
		Short: "Call Pids: the task's processes, with the exec id of each exec",
		Long: `ps lists every process in the task's cgroup. A process that the shim started
for an exec carries that exec's id (from the ProcessDetails in its Info); the
others (the init and their children) show "-".`,
		Example: "  shimctl task ps demo",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		resp, err := c.Task.Pids(cmd.Context(), &taskapi.PidsRequest{ID: id})
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "PID\tEXEC")
		for _, p := range resp.Processes {
			execID := "-"
			if p.Info != nil {
				v, err := typeurl.UnmarshalAny(p.Info)
				if err != nil {
					return fmt.Errorf("info of %d: %w", p.Pid, err)
				}
				if pd, ok := v.(*options.ProcessDetails); ok && pd.ExecID != "" {
					execID = pd.ExecID
				}
			}
			fmt.Fprintf(w, "%d\t%s\n", p.Pid, execID)
		}
		return w.Flush()
	})
}

func taskPauseCommand(g *globals) *cobra.Command {
	return callShim(g, "pause", &cobra.Command{
		Use:     "pause TASK",
		Short:   "Call Pause: freeze every process of the task (cgroup freezer)",
		Example: "  shimctl task pause demo\n  shimctl task state demo   # PAUSED",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		_, err := c.Task.Pause(cmd.Context(), &taskapi.PauseRequest{ID: id})
		return err
	})
}

func taskResumeCommand(g *globals) *cobra.Command {
	return callShim(g, "resume", &cobra.Command{
		Use:     "resume TASK",
		Short:   "Call Resume: thaw a paused task",
		Example: "  shimctl task resume demo",
	}, func(cmd *cobra.Command, c *driver.Conn, id string) error {
		_, err := c.Task.Resume(cmd.Context(), &taskapi.ResumeRequest{ID: id})
		return err
	})
}
