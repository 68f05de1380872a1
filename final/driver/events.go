// SPDX-License-Identifier: Apache-2.0

// The receiving end of the events shims publish: a ttrpc Events service on the socket named by
// TTRPC_ADDRESS, which keeps every envelope in arrival order for the caller to read. containerd
// v2.4 serves the same service in plugins/services/events/service.go and hands the envelopes to
// its exchange.

package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	eventsapi "github.com/containerd/containerd/api/services/ttrpc/events/v1"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/emptypb"

	// Registers the task event types, so that envelopes decode into them.
	_ "github.com/containerd/containerd/api/events"
)

// Event is one envelope a shim forwarded, decoded.
type Event struct {
	Timestamp time.Time
	Namespace string
	Topic     string
	Event     any // *events.TaskCreate, *events.TaskExit, ...
}

// EventServer plays containerd's ttrpc Events service
// (containerd.services.events.ttrpc.v1.Events): shims forward their task events to it.
type EventServer struct {
	Address string
	srv     *ttrpc.Server
	served  chan struct{} // closed when Serve returned

	mu      sync.Mutex
	events  []Event       // guarded by mu
	arrived chan struct{} // closed and replaced on every event; guarded by mu
}

var _ eventsapi.TTRPCEventsService = (*EventServer)(nil)

// ListenEvents serves the Events service on a unix socket at path (0600, replacing a stale one).
func ListenEvents(path string) (*EventServer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("events socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale events socket: %w", err)
	}
	// Not umask: the driver is a library in a multi-threaded program, and a process-wide umask
	// would leak into files other goroutines create meanwhile. The 0700 directory keeps others
	// out until the chmod.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen for events: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("events socket mode: %w", err)
	}
	srv, err := ttrpc.NewServer(ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("events server: %w", err)
	}
	s := &EventServer{Address: path, srv: srv, served: make(chan struct{}), arrived: make(chan struct{})}
	eventsapi.RegisterTTRPCEventsService(srv, s)
	go func() {
		// Owned by s: Close shuts the server down, which ends Serve.
		defer close(s.served)
		srv.Serve(context.Background(), ln)
	}()
	return s, nil
}

// Forward receives one event from a shim.
func (s *EventServer) Forward(ctx context.Context, r *eventsapi.ForwardRequest) (*emptypb.Empty, error) {
	env := r.GetEnvelope()
	if env == nil {
		return nil, fmt.Errorf("forward without an envelope: %w", os.ErrInvalid)
	}
	e := Event{Timestamp: env.GetTimestamp().AsTime(), Namespace: env.GetNamespace(), Topic: env.GetTopic()}
	if env.GetEvent() != nil {
		v, err := typeurl.UnmarshalAny(env.GetEvent())
		if err != nil {
			return nil, fmt.Errorf("decode %s event: %w", e.Topic, err)
		}
		e.Event = v
	}
	s.mu.Lock()
	s.events = append(s.events, e)
	close(s.arrived)
	s.arrived = make(chan struct{})
	s.mu.Unlock()
	return &emptypb.Empty{}, nil
}

// Events returns every event received so far, in arrival order.
func (s *EventServer) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// Next returns the event after the first n received, waiting for it until ctx ends. Reading
// with n = 0, 1, 2, ... follows the stream from the start.
func (s *EventServer) Next(ctx context.Context, n int) (Event, error) {
	for {
		s.mu.Lock()
		if n < len(s.events) {
			e := s.events[n]
			s.mu.Unlock()
			return e, nil
		}
		arrived := s.arrived
		s.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close stops serving and removes the socket.
func (s *EventServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.served
	if err := os.Remove(s.Address); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
