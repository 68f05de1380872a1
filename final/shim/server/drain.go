// SPDX-License-Identifier: Apache-2.0

// Draining the Task API before the shim exits. containerd's runc shim (pkg/shim serve) leaves
// its replies to chance: the process may end before the Shutdown reply is written, which is
// why containerd takes a closed connection from Shutdown for success. Here the shim waits for
// its clients to hang up.

package server

import (
	"context"
	"net"
	"sync"

	"github.com/containerd/ttrpc"
)

// tracker counts the open connections and the RPCs being handled, and wakes a waiter on every
// change.
type tracker struct {
	mu       sync.Mutex
	conns    int
	calls    int
	stopping bool          // no new RPC is taken on
	changed  chan struct{} // closed and replaced on every change
}

func newTracker() *tracker { return &tracker{changed: make(chan struct{})} }

func (t *tracker) add(conns, calls int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conns += conns
	t.calls += calls
	close(t.changed)
	t.changed = make(chan struct{})
}

// begin counts an RPC in, unless the shim is stopping: an RPC that came on a connection still
// open then (a Create for a container of the same group, say) would start work that nobody
// is left to finish.
func (t *tracker) begin() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping {
		return false
	}
	t.calls++
	return true
}

func (t *tracker) end() { t.add(0, -1) }

// stop refuses every RPC from now on.
func (t *tracker) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopping = true
}

func (t *tracker) connections() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns
}

func (t *tracker) rpcs() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls
}

// drained waits until no RPC is handled and every client has closed its connection, and says
// whether that happened before ctx ended.
func (t *tracker) drained(ctx context.Context) bool {
	for {
		t.mu.Lock()
		idle, changed := t.conns == 0 && t.calls == 0, t.changed
		t.mu.Unlock()
		if idle {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// handshaker counts each connection next accepted, wrapping the ttrpc handshaker: it sees the
// *net.UnixConn the credential check needs, and hands ttrpc a conn that reports its Close.
func (t *tracker) handshaker(next ttrpc.Handshaker) ttrpc.Handshaker {
	return handshakerFunc(func(ctx context.Context, conn net.Conn) (net.Conn, any, error) {
		c, info, err := next.Handshake(ctx, conn)
		if err != nil {
			return c, info, err
		}
		t.add(1, 0)
		return &trackedConn{Conn: c, closed: func() { t.add(-1, 0) }}, info, nil
	})
}

type handshakerFunc func(ctx context.Context, conn net.Conn) (net.Conn, any, error)

func (f handshakerFunc) Handshake(ctx context.Context, conn net.Conn) (net.Conn, any, error) {
	return f(ctx, conn)
}

// trackedConn reports its first Close: ttrpc closes a connection when its client hangs up,
// and when the server closes it.
type trackedConn struct {
	net.Conn
	once   sync.Once
	closed func()
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.closed)
	return err
}
