// SPDX-License-Identifier: Apache-2.0

// A process's terminal: the pty master runc sends over the console socket, copied to and from
// containerd's FIFOs through one epoll instance that serves every terminal of the shim.
// Mirrors containerd v2.4 cmd/containerd-shim-runc-v2/runc/platform.go (NewPlatform,
// CopyConsole, ShutdownConsole) and the ShutdownConsole of process/init.go and exec.go at exit.

package stdio

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/containerd/console"
	"github.com/containerd/errdefs"
	runc "github.com/containerd/go-runc"
)

// The epoller waits for every terminal of the shim in a single thread. A copy that read the
// master with read(2) would hold an OS thread per terminal for as long as the terminal lives;
// through the epoller a waiting copy is a parked goroutine. Its goroutine lives as long as the
// shim, as containerd's platform's does: epoll_wait cannot be woken to stop, and closing the
// epoll descriptor under it would not wake it either.
var (
	epollMu sync.Mutex
	epoller *console.Epoller // guarded by epollMu; made by the first terminal
)

func sharedEpoller() (*console.Epoller, error) {
	epollMu.Lock()
	defer epollMu.Unlock()
	if epoller != nil {
		return epoller, nil
	}
	e, err := console.NewEpoller()
	if err != nil {
		return nil, fmt.Errorf("create the terminals' epoll instance: %w", err)
	}
	go func() {
		// Owned by the shim process (see above): ends only with it.
		_ = e.Wait()
	}()
	epoller = e
	return e, nil
}

// ptyReadSize is the most one read of a pty master returns (N_TTY_BUF_SIZE).
const ptyReadSize = 4096

// Console is a process's terminal. runc creates the pty and sends its master end over a unix
// socket; the shim copies between the master and the FIFOs containerd named.
type Console struct {
	cfg    Config
	socket *runc.Socket

	mu      sync.Mutex
	master  *console.EpollConsole // guarded by mu; nil until Attach
	shut    bool                  // guarded by mu; Shutdown was called
	epoller *console.Epoller      // guarded by mu; the one master is registered with, nil once off it
	stdin   io.Closer             // guarded by mu; the stdin FIFO's read end
	keeper  io.Closer             // guarded by mu; the shim's writer of the stdin FIFO (openStdin)
	wg      sync.WaitGroup        // the output copy
	// With a binary:// stdout, the logging binary and the write end of its stdout, which the
	// output copy writes to and closes.
	logger *logger
	logOut *os.File
}

// NewConsole makes the socket runc sends the master to (runc --console-socket). The terminal's
// output goes to the stdout FIFO or, for a binary:// URI, to a logging binary, started now
// with id and namespace in its environment (see startLogger): its stderr pipe is closed at
// once, a terminal having one stream. Other URIs are refused, as containerd's shim does.
func NewConsole(cfg Config, id, namespace string, monitor runc.ProcessMonitor) (_ *Console, err error) {
	if !cfg.Terminal {
		return nil, errors.New("not a terminal")
	}
	// Checked now, before runc makes a container whose terminal could not be attached.
	if cfg.Stdin != "" {
		if err := checkFIFO(cfg.Stdin); err != nil {
			return nil, err
		}
	}
	c := &Console{cfg: cfg}
	if cfg.Stdout != "" {
		u, err := url.Parse(cfg.Stdout)
		if err != nil {
			return nil, fmt.Errorf("stdout %q: %v: %w", cfg.Stdout, err, errdefs.ErrInvalidArgument)
		}
		switch u.Scheme {
		case "", "fifo":
			if err := checkFIFO(cfg.Stdout); err != nil {
				return nil, err
			}
		case "binary", "binary-v2":
			out, errOut, lg, err := startLogger(u, id, namespace, monitor)
			if err != nil {
				return nil, err
			}
			errOut.Close()
			c.logger, c.logOut = lg, out
			defer func() {
				if err != nil {
					out.Close()
					_ = lg.stop()
				}
			}()
		default:
			return nil, fmt.Errorf("stdout %q: a terminal's output goes to a FIFO or a logging binary (binary://, binary-v2://), not %s://: %w", cfg.Stdout, u.Scheme, errdefs.ErrInvalidArgument)
		}
	}
	s, err := runc.NewTempConsoleSocket()
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	c.socket = s
	return c, nil
}

// Socket is what runc create or runc exec gets as --console-socket.
func (c *Console) Socket() runc.ConsoleSocket {
	return c.socket
}

// Attach receives the master from runc (call it after runc create or exec returned) and starts
// the copies: stdin FIFO to the terminal, the terminal to the stdout FIFO.
func (c *Console) Attach() error {
	m, err := c.socket.ReceiveMaster()
	c.socket.Close()
	if err != nil {
		return fmt.Errorf("receive the pty master: %w", err)
	}
	ep, err := sharedEpoller()
	if err != nil {
		m.Close()
		return err
	}
	// From here on the master is non-blocking, and read and written through the epoller.
	master, err := ep.Add(m)
	if err != nil {
		m.Close()
		return fmt.Errorf("watch the pty master: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.master, c.epoller = master, ep
	if c.shut {
		// The process exited before its terminal was attached: copy what it left, no more.
		c.shutdown()
	}
	if c.cfg.Stdout != "" {
		var out io.WriteCloser = c.logOut
		if c.logOut == nil {
			if out, err = outputFIFO(c.cfg.Stdout); err != nil {
				return fmt.Errorf("open %s: %w", c.cfg.Stdout, err)
			}
		}
		c.wg.Add(1)
		go func() {
			// Owned by c: ends once the process has exited (Shutdown) and what it wrote is
			// copied, or when Close closes the master.
			defer c.wg.Done()
			// The copy holds its buffer while it waits, for the terminal's whole life. A read
			// of a pty master returns at most the line discipline's 4 KiB, so a bigger buffer,
			// such as the 32 KiB io.Copy would take, is never filled; containerd's shim copies
			// with 4 KiB too. The writer is wrapped so that os.File's ReadFrom, which would
			// take its own 32 KiB buffer, is not used.
			buf := make([]byte, ptyReadSize)
			_, _ = io.CopyBuffer(struct{ io.Writer }{out}, master, buf)
			out.Close()
		}()
	}
	if c.cfg.Stdin != "" {
		in, keeper, err := openStdin(c.cfg.Stdin)
		if err != nil {
			return err
		}
		c.stdin, c.keeper = in, keeper
		go func() {
			// Owned by c: ends at EOF, once CloseIO closed the shim's writer and no client
			// holds one, or when Close closes the FIFO or the master.
			if err := copyWhenReady(master, in); err == nil {
				// The end of input closes the terminal, as containerd's shim does (CopyConsole):
				// the process's session is hung up. On a terminal, end of input is otherwise a
				// ^D that nobody will type once the client has gone (a kubectl exec -it whose
				// client went away), and the process would wait for it for good.
				_ = c.closeMaster()
			}
		}()
	}
	return nil
}

// Resize sets the terminal's size (the ResizePty RPC).
func (c *Console) Resize(width, height uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.master == nil {
		// Not started yet, as containerd's shim, which has no console before then either.
		return nil
	}
	return c.master.Resize(console.WinSize{Width: uint16(width), Height: uint16(height)})
}

// CloseStdin ends the input copied into the terminal (the CloseIO RPC): it closes the shim's
// writer of the stdin FIFO; once the clients have closed theirs, the copy ends and closes the
// terminal (see Attach).
func (c *Console) CloseStdin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keeper == nil {
		return nil
	}
	err := c.keeper.Close()
	c.keeper = nil
	return err
}

// Shutdown ends the terminal's copies once what it holds is read: the process has exited. Any
// other process still holding the terminal (a child left in the background) is not waited for:
// its output has no reader, as with containerd's shim (ShutdownConsole at exit). The master
// stays open, for a Resize, until Close.
func (c *Console) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shut = true
	c.shutdown()
}

// shutdown is Shutdown with mu held. Once the master is off the epoller, a read that finds
// nothing more ends the output copy instead of waiting.
func (c *Console) shutdown() {
	if c.master == nil || c.epoller == nil {
		return
	}
	ep := c.epoller
	c.epoller = nil // unregistered once only
	_ = c.master.Shutdown(ep.CloseConsole)
}

// Wait blocks until the output copy is done, at most timeout. It is called once the process
// is gone, so it shuts the terminal down first: after a runc delete --force of a created
// container, the exit may not have been recorded yet.
func (c *Console) Wait(timeout time.Duration) {
	c.Shutdown()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// Close closes the terminal and the FIFOs, and waits for the logging binary to exit: that may
// take up to loggerGrace.
func (c *Console) Close() error {
	c.socket.Close()
	c.CloseStdin()
	err := c.closeMaster()
	if c.logger != nil {
		// Closed by the output copy when it ended; not if it never started or is stuck.
		c.logOut.Close()
		err = errors.Join(err, c.logger.awaitEOF())
	}
	return err
}

func (c *Console) closeMaster() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin != nil {
		c.stdin.Close()
	}
	if c.master == nil {
		return nil
	}
	c.shut = true
	c.shutdown()
	err := c.master.Close()
	// A stdin copy waiting for room in the terminal is woken to find it closed. The epoller
	// is not asked again: the descriptor's number may already be another file's.
	_ = c.master.Shutdown(func(int) error { return nil })
	return err
}
