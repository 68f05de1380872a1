// SPDX-License-Identifier: Apache-2.0

// Task events forwarded to containerd (since step 05; kept until delivered since step 06).
// Mirrors containerd v2.4 pkg/shim/publisher.go (RemoteEventsPublisher: a queue drained by one
// goroutine that forwards over ttrpc to TTRPC_ADDRESS with backoff). Unlike it, an event is
// retried until containerd takes it: containerd's shim gives up after a few attempts, and an
// exit that happens while containerd restarts is lost (containerd issue #6771).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	eventsapi "github.com/containerd/containerd/api/services/ttrpc/events/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Topics of the task events, as containerd names them (core/runtime: TaskCreateEventTopic, ...).
const (
	topicCreate = "/tasks/create"
	topicStart  = "/tasks/start"
	topicExit   = "/tasks/exit"
	topicDelete = "/tasks/delete"
)

// maxQueued bounds the events kept while containerd is away. Beyond it the oldest are dropped:
// memory must stay bounded, and the newest events (a TaskExit) matter most.
const maxQueued = 1024

// maxBackoff is the longest pause between two attempts, and so about the longest delay
// between containerd coming back and the queue starting to drain.
const maxBackoff = 2 * time.Second

// publisher forwards events in the order they were published. publish never blocks: an RPC
// must not wait for containerd, which may be waiting for that very RPC.
type publisher struct {
	address   string
	namespace string
	log       *slog.Logger

	mu      sync.Mutex
	queue   []*types.Envelope // guarded by mu
	ready   chan struct{}     // a wake-up for run, capacity 1
	closed  bool              // guarded by mu
	dropped int               // events dropped since the last report; guarded by mu
	sending *types.Envelope   // the event run is forwarding, still first in the queue; guarded by mu
	failing bool              // the last attempt to forward failed; guarded by mu
	done    chan struct{}     // closed when run returns
	abort   context.CancelFunc
	ctx     context.Context // ends run at once, queue or not
}

func newPublisher(address, namespace string, log *slog.Logger) *publisher {
	ctx, abort := context.WithCancel(context.Background())
	return &publisher{
		address:   strings.TrimPrefix(address, "unix://"),
		namespace: namespace,
		log:       log,
		ready:     make(chan struct{}, 1),
		done:      make(chan struct{}),
		ctx:       ctx,
		abort:     abort,
	}
}

// publish queues event for forwarding, stamped with the current time.
func (p *publisher) publish(topic string, event proto.Message) {
	any, err := typeurl.MarshalAnyToProto(event)
	if err != nil {
		p.log.Error("encode event", "topic", topic, "err", err)
		return
	}
	env := &types.Envelope{Timestamp: timestamppb.Now(), Namespace: p.namespace, Topic: topic, Event: any}
	p.mu.Lock()
	if !p.closed {
		if len(p.queue) >= maxQueued {
			// The event in flight leaves the queue but still goes out: it is not lost.
			if p.queue[0] != p.sending {
				p.dropped++
			}
			p.queue = p.queue[1:]
		}
		p.queue = append(p.queue, env)
	}
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// run forwards queued events until close has been called and the queue is empty. It is the
// only user of the connection to containerd.
func (p *publisher) run() {
	defer close(p.done)
	var client *ttrpc.Client
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			select {
			case <-p.ready:
			case <-p.ctx.Done():
				return
			}
			continue
		}
		env := p.queue[0]
		p.sending = env
		p.mu.Unlock()

		// No retry limit: the event waits, in order, until containerd (or whoever listens at
		// TTRPC_ADDRESS) takes it.
		for attempt := 1; ; attempt++ {
			var err error
			if client == nil {
				client, err = p.dial()
			}
			if client != nil {
				if err = p.forward(client, env); err == nil {
					p.setFailing(false)
					break
				}
				client.Close()
				client = nil
			}
			p.setFailing(true)
			if attempt == 1 || attempt%30 == 0 {
				p.log.Warn("forward event", "topic", env.Topic, "attempt", attempt, "err", err)
			}
			backoff := min(time.Duration(attempt)*100*time.Millisecond, maxBackoff)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
		}
		p.mu.Lock()
		p.sending = nil
		// The queue may have dropped env itself while we forwarded it; only pop if it is still first.
		if len(p.queue) > 0 && p.queue[0] == env {
			p.queue = p.queue[1:]
		}
		if p.dropped > 0 {
			p.log.Warn("events dropped while the events service was unreachable", "count", p.dropped)
			p.dropped = 0
		}
		p.mu.Unlock()
	}
}

func (p *publisher) dial() (*ttrpc.Client, error) {
	if p.address == "" {
		return nil, fmt.Errorf("TTRPC_ADDRESS is not set")
	}
	conn, err := net.DialTimeout("unix", p.address, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial events service: %w", err)
	}
	return ttrpc.NewClient(conn), nil
}

func (p *publisher) forward(client *ttrpc.Client, env *types.Envelope) error {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	_, err := eventsapi.NewTTRPCEventsClient(client).Forward(ctx, &eventsapi.ForwardRequest{Envelope: env})
	return err
}

// close stops taking events and waits, until ctx ends, for the queued ones to be forwarded:
// the TaskDelete event of the last task must reach containerd before the shim exits.
func (p *publisher) close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	failing := p.failing
	p.mu.Unlock()
	if failing {
		// Nobody is taking events now; waiting would only delay the exit.
		p.log.Warn("events not forwarded at exit", "queued", p.pending())
		p.abort()
		<-p.done
		return
	}
	select {
	case p.ready <- struct{}{}:
	default:
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.log.Warn("events not forwarded at exit", "queued", p.pending())
		p.abort()
		<-p.done
	}
}

// pending is the number of events not yet forwarded: those queued, and the one in flight if a
// full queue has let go of it.
func (p *publisher) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.queue)
	if p.sending != nil && (n == 0 || p.queue[0] != p.sending) {
		n++
	}
	return n
}

func (p *publisher) setFailing(failing bool) {
	p.mu.Lock()
	p.failing = failing
	p.mu.Unlock()
}
