// SPDX-License-Identifier: Apache-2.0

package stdio

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/containerd/console"
	runc "github.com/containerd/go-runc"
)

// Console is a process's terminal. runc creates the pty and sends its master end over a unix
// socket; the shim copies between the master and the FIFOs containerd named.
type Console struct {
	cfg    Config
	socket *runc.Socket

	mu     sync.Mutex
	master console.Console // guarded by mu; nil until Attach
	stdin  io.Closer       // guarded by mu; the stdin FIFO's read end
	keeper io.Closer       // guarded by mu; the shim's writer of the stdin FIFO (openStdin)
	wg     sync.WaitGroup  // the output copy
}

// NewConsole makes the socket runc sends the master to (runc --console-socket).
func NewConsole(cfg Config) (*Console, error) {
	if !cfg.Terminal {
		return nil, errors.New("not a terminal")
	}
	// Checked now, before runc makes a container whose terminal could not be attached.
	for _, path := range []string{cfg.Stdin, cfg.Stdout} {
		if path != "" {
			if err := CheckFIFO(path); err != nil {
				return nil, err
			}
		}
	}
	s, err := runc.NewTempConsoleSocket()
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	return &Console{cfg: cfg, socket: s}, nil
}

// Socket is what runc create or runc exec gets as --console-socket.
func (c *Console) Socket() runc.ConsoleSocket {
	return c.socket
}

// Attach receives the master from runc (call it after runc create or exec returned) and starts
// the copies: stdin FIFO to the terminal, the terminal to the stdout FIFO.
func (c *Console) Attach() error {
	master, err := c.socket.ReceiveMaster()
	c.socket.Close()
	if err != nil {
		return fmt.Errorf("receive the pty master: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.master = master
	if c.cfg.Stdout != "" {
		out, err := outputFIFO(c.cfg.Stdout)
		if err != nil {
			return fmt.Errorf("open %s: %w", c.cfg.Stdout, err)
		}
		c.wg.Add(1)
		go func() {
			// Owned by c: ends when the last process holding the terminal exits (reads fail
			// with EIO then), or when Close closes the master.
			defer c.wg.Done()
			io.Copy(out, master)
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
			// holds one, or when Close closes the FIFO.
			io.Copy(master, in)
		}()
	}
	return nil
}

// Resize sets the terminal's size (the ResizePty RPC).
func (c *Console) Resize(width, height uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.master == nil {
		return errors.New("the terminal is not attached yet")
	}
	return c.master.Resize(console.WinSize{Width: uint16(width), Height: uint16(height)})
}

// CloseStdin ends the input copied into the terminal (the CloseIO RPC): it closes the shim's
// writer of the stdin FIFO, and the copy ends once the clients have closed theirs. The terminal
// stays: on a terminal, end of input is a character (^D), not a closed descriptor.
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

// Wait blocks until the output copy is done, at most timeout.
func (c *Console) Wait(timeout time.Duration) {
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// Close closes the terminal and the FIFOs.
func (c *Console) Close() error {
	c.socket.Close()
	c.CloseStdin()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin != nil {
		c.stdin.Close()
	}
	if c.master != nil {
		return c.master.Close()
	}
	return nil
}
