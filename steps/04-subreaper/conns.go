// SPDX-License-Identifier: Apache-2.0

// The callers' connections (since step 02), counted so that a Shutdown's reply reaches its
// caller before the shim goes. ttrpc's Server.Shutdown closes every connection it finds idle,
// and a connection whose Shutdown reply is still queued can look idle: the caller then sees the
// connection closed instead of the reply. containerd v2.4 takes that for success (shimTask.delete in
// core/runtime/v2/shim.go); the shim does not rely on it. containerd's own shim (pkg/shim)
// has the same race.
package main

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/containerd/ttrpc"
)

// conns counts the connections ttrpc serves.
type conns struct {
	mu   sync.Mutex
	open int
	none chan struct{} // closed, and replaced, whenever open drops to 0
}

func newConns() *conns { return &conns{none: make(chan struct{})} }

// handshaker wraps the credential check: what it approves is counted until ttrpc closes it.
func (c *conns) handshaker(inner ttrpc.Handshaker) ttrpc.Handshaker {
	return countingHandshaker{inner: inner, c: c}
}

type countingHandshaker struct {
	inner ttrpc.Handshaker
	c     *conns
}

func (h countingHandshaker) Handshake(ctx context.Context, conn net.Conn) (net.Conn, any, error) {
	approved, info, err := h.inner.Handshake(ctx, conn)
	if err != nil {
		return nil, nil, err
	}
	h.c.mu.Lock()
	h.c.open++
	h.c.mu.Unlock()
	return &countedConn{Conn: approved, c: h.c}, info, nil
}

func (c *conns) closed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open--; c.open == 0 {
		close(c.none)
		c.none = make(chan struct{})
	}
}

// waitHangUp waits until every caller has closed its connection, as containerd does as soon as
// it has the Shutdown reply, or until bound passes for a caller that keeps its connection.
func (c *conns) waitHangUp(bound time.Duration) {
	c.mu.Lock()
	open, none := c.open, c.none
	c.mu.Unlock()
	if open == 0 {
		return
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-none:
	case <-timer.C:
	}
}

type countedConn struct {
	net.Conn
	c    *conns
	once sync.Once
}

func (cc *countedConn) Close() error {
	cc.once.Do(cc.c.closed)
	return cc.Conn.Close()
}
