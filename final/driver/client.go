// SPDX-License-Identifier: Apache-2.0

// The driver's connection to a shim's Task service: dialled at the unix:// address the bundle's
// bootstrap.json records, as containerd v2.4's makeConnection (core/runtime/v2/shim.go) does
// for a ttrpc shim, and the status code and message of a failed RPC for one-line reports.

package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Conn is a ttrpc connection to one shim's Task service.
type Conn struct {
	Task   taskapi.TTRPCTaskService
	client *ttrpc.Client
}

// Dial connects to the shim at a unix:// address.
func Dial(ctx context.Context, address string) (*Conn, error) {
	if err := checkAddress(address); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", strings.TrimPrefix(address, "unix://"))
	if err != nil {
		return nil, fmt.Errorf("connect to shim: %w", err)
	}
	client := ttrpc.NewClient(nc)
	return &Conn{Task: taskapi.NewTTRPCTaskClient(client), client: client}, nil
}

// Connect dials the shim of task id at the address its bundle records.
func (d *Driver) Connect(ctx context.Context, id string) (*Conn, error) {
	if err := ValidateID("id", id); err != nil {
		return nil, err
	}
	b, err := ReadBootstrap(d.Bundle(id))
	if err != nil {
		return nil, err
	}
	// The reconnect of step 06 and of containerd after a restart: the bundle, not memory, says
	// where the shim is.
	d.Trace.Add(Record{Kind: KindPoint, Participant: "shimctl", Name: "reads bootstrap.json for the shim's address"})
	c, err := Dial(ctx, b.Address)
	if err == nil {
		c.Task = d.Trace.wrap(c.Task)
	}
	return c, err
}

// Close closes the connection; the shim lives on.
func (c *Conn) Close() error {
	return c.client.Close()
}

// Code is the status code of an RPC error (codes.OK for nil, codes.Unknown for a non-status
// error, such as a closed connection).
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code()
	}
	return codes.Unknown
}

// Message is an RPC error's message without the transport's prefix, for one-line reports.
func Message(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}
	return err.Error()
}
