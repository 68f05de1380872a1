// SPDX-License-Identifier: Apache-2.0

// The event publisher: a bounded queue of task events, drained in order by one goroutine that
// forwards each to containerd's ttrpc Events service until it is taken. It mirrors containerd
// v2.4 pkg/shim/publisher.go (RemoteEventsPublisher.Publish, processQueue, forwardRequest).

package events

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
	TopicCreate       = "/tasks/create"
	TopicStart        = "/tasks/start"
	TopicExit         = "/tasks/exit"
	TopicDelete       = "/tasks/delete"
	TopicExecAdded    = "/tasks/exec-added"
	TopicExecStarted  = "/tasks/exec-started"
	TopicPaused       = "/tasks/paused"
	TopicResumed      = "/tasks/resumed"
	TopicCheckpointed = "/tasks/checkpointed"
	TopicOOM          = "/tasks/oom"
)

// defaultMaxQueued bounds the events kept while containerd is away.
const defaultMaxQueued = 1024

// maxBackoff is the longest pause between two attempts, and so about the longest delay
// between containerd coming back and the queue starting to drain.
const maxBackoff = 2 * time.Second

// Publisher forwards events in the order they were published. Publish never blocks: an RPC
// must not wait for containerd, which may be waiting for that very RPC.
type Publisher struct {
	address   string
	namespace string
	log       *slog.Logger
	maxQueued int

	mu      sync.Mutex
	queue   []*types.Envelope // guarded by mu
	closed  bool              // guarded by mu
	dropped int               // dropped since the last report; guarded by mu
	sending *types.Envelope   // the event Run is forwarding, still first in the queue; guarded by mu
	failing bool              // the last attempt to forward failed; guarded by mu
	ready   chan struct{}     // a wake-up for Run, capacity 1
	done    chan struct{}     // closed when Run returns
	ctx     context.Context   // ends Run at once, queue or not
	abort   context.CancelFunc
}

// NewPublisher returns a publisher for the Events service at address (TTRPC_ADDRESS; a path,
// with or without unix://). Start Run before publishing matters.
func NewPublisher(address, namespace string, log *slog.Logger) *Publisher {
	ctx, abort := context.WithCancel(context.Background())
	return &Publisher{
		address:   strings.TrimPrefix(address, "unix://"),
		namespace: namespace,
		log:       log,
		maxQueued: defaultMaxQueued,
		ready:     make(chan struct{}, 1),
		done:      make(chan struct{}),
		ctx:       ctx,
		abort:     abort,
	}
}

// Publish queues event under topic, stamped with the current time.
func (p *Publisher) Publish(topic string, event proto.Message) {
	any, err := typeurl.MarshalAnyToProto(event)
	if err != nil {
		p.log.Error("encode event", "topic", topic, "err", err)
		return
	}
	env := &types.Envelope{Timestamp: timestamppb.Now(), Namespace: p.namespace, Topic: topic, Event: any}
	p.mu.Lock()
	if !p.closed {
		if len(p.queue) >= p.maxQueued {
			// The event in flight leaves the queue but still goes out: it is not lost.
			if p.queue[0] != p.sending {
				p.dropped++
			}
			p.queue = p.queue[1:]
		}
		p.queue = append(p.queue, env)
	}
	p.mu.Unlock()
	p.wake()
}

func (p *Publisher) wake() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// Run forwards queued events until Close has been called and the queue is empty, or Close gave
// up. It is the only user of the connection to containerd.
func (p *Publisher) Run() {
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
			select {
			case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, maxBackoff)):
			case <-p.ctx.Done():
				return
			}
		}
		p.mu.Lock()
		p.sending = nil
		// The queue may have dropped env itself meanwhile; only pop it if it is still first.
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

func (p *Publisher) dial() (*ttrpc.Client, error) {
	if p.address == "" {
		return nil, fmt.Errorf("TTRPC_ADDRESS is not set")
	}
	conn, err := net.DialTimeout("unix", p.address, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial events service: %w", err)
	}
	return ttrpc.NewClient(conn), nil
}

func (p *Publisher) forward(client *ttrpc.Client, env *types.Envelope) error {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	_, err := eventsapi.NewTTRPCEventsClient(client).Forward(ctx, &eventsapi.ForwardRequest{Envelope: env})
	return err
}

// Close stops taking events and waits, until ctx ends, for the queued ones to be forwarded:
// the TaskDelete of the last task must reach containerd before the shim exits. Then Run ends.
func (p *Publisher) Close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	failing := p.failing
	p.mu.Unlock()
	p.wake()
	if failing {
		// Nobody is taking events now; waiting would only delay the exit.
		p.log.Warn("events not forwarded at exit", "queued", p.pending())
		p.abort()
		<-p.done
		return
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
func (p *Publisher) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.queue)
	if p.sending != nil && (n == 0 || p.queue[0] != p.sending) {
		n++
	}
	return n
}

func (p *Publisher) setFailing(failing bool) {
	p.mu.Lock()
	p.failing = failing
	p.mu.Unlock()
}
