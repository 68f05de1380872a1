// SPDX-License-Identifier: Apache-2.0

// The local end of a foreground task's stdio. Mirrors what ctr does in containerd v2.4
// cmd/ctr/commands/tasks (console.Current, SetRaw, HandleConsoleResize, CloseIO at stdin's EOF),
// with the FIFOs of final/driver instead of the cio package.

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/console"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
)

// taskStdio is a foreground process's FIFOs, the copies through them and, with a terminal, the
// local terminal in raw mode.
type taskStdio struct {
	fifos    *driver.FIFOs
	attached *driver.Attached
	stdin    io.WriteCloser // the stdin FIFO's write end; nil without a terminal
	con      console.Console
	in       io.Reader
	notes    io.Writer
	winch    chan os.Signal
	stop     chan struct{}
}

// openStdio makes the FIFOs of a process of task id and starts copying its output to cmd's.
// With tty the process gets a terminal: stdin and stdout FIFOs only, as containerd does, and
// shimctl's own terminal goes into raw mode until close.
func openStdio(ctx context.Context, cmd *cobra.Command, d *driver.Driver, id string, tty bool) (*taskStdio, error) {
	s := &taskStdio{in: cmd.InOrStdin(), notes: cmd.ErrOrStderr(), stop: make(chan struct{})}
	if tty {
		con, err := console.ConsoleFromFile(os.Stdin)
		if err != nil {
			return nil, usageError{errors.New("-t needs a terminal on stdin")}
		}
		s.con = con
	}
	fifos, err := d.NewFIFOs(id, tty)
	if err != nil {
		return nil, err
	}
	s.fifos = fifos
	if tty {
		// A terminal merges stderr into stdout; the shim must get no stderr FIFO.
		fifos.Stderr = ""
	}
	// Not ctx: once the process runs, an interrupt is for it, and the copies must go on.
	s.attached, err = fifos.Attach(context.WithoutCancel(ctx), nil, cmd.OutOrStdout(), cmd.ErrOrStderr())
	if err != nil {
		fifos.Remove()
		return nil, err
	}
	if tty {
		if s.stdin, err = fifos.OpenStdin(context.WithoutCancel(ctx)); err != nil {
			s.close()
			return nil, err
		}
		// Last, so that every failure before leaves the terminal as it was.
		if err := s.con.SetRaw(); err != nil {
			s.close()
			return nil, fmt.Errorf("terminal raw mode: %w", err)
		}
		s.winch = make(chan os.Signal, 1)
		signal.Notify(s.winch, syscall.SIGWINCH)
	}
	return s, nil
}

// started runs once the process has started: with a terminal it sends the window size, keeps
// forwarding its changes, and copies stdin to the process until EOF, then CloseIO.
func (s *taskStdio) started(ctx context.Context, c *driver.Conn, id, execID string) {
	if s.con == nil {
		return
	}
	s.resize(ctx, c, id, execID)
	go func() {
		// Owned by s: ends when close closes stop.
		for {
			select {
			case <-s.stop:
				return
			case <-s.winch:
				s.resize(ctx, c, id, execID)
			}
		}
	}()
	go func() {
		// Not stopped by close: a read from the terminal cannot be interrupted, and ends with
		// shimctl. Closing the FIFO makes its writes fail, which ends the copy.
		io.Copy(s.stdin, s.in)
		s.stdin.Close()
		_, err := c.Task.CloseIO(ctx, &taskapi.CloseIORequest{ID: id, ExecID: execID, Stdin: true})
		if err != nil && driver.Code(err) != codes.NotFound {
			fmt.Fprintf(s.notes, "shimctl: close stdin: %s\r\n", describe(err))
		}
	}()
}

func (s *taskStdio) resize(ctx context.Context, c *driver.Conn, id, execID string) {
	size, err := s.con.Size()
	if err != nil {
		return
	}
	_, err = c.Task.ResizePty(ctx, &taskapi.ResizePtyRequest{ID: id, ExecID: execID,
		Width: uint32(size.Width), Height: uint32(size.Height)})
	if err != nil && driver.Code(err) != codes.NotFound {
		fmt.Fprintf(s.notes, "shimctl: resize: %s\r\n", describe(err))
	}
}

// close ends the copies, removes the FIFOs and restores the terminal. It runs on every path
// out of a command that opened stdio.
func (s *taskStdio) close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	if s.winch != nil {
		signal.Stop(s.winch)
	}
	if s.con != nil {
		_ = s.con.Reset()
	}
	if s.stdin != nil {
		s.stdin.Close()
	}
	s.attached.Close()
	s.fifos.Remove()
}

// notifySignals starts collecting the signals a foreground command forwards to its process.
// Registered before anything starts, so that no signal is lost between Start and the
// forwarder. SIGHUP is among them: a closed terminal must not end shimctl before it restored it.
func notifySignals() chan os.Signal {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	return signals
}

func stopSignals(signals chan os.Signal) { signal.Stop(signals) }
