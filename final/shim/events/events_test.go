// SPDX-License-Identifier: Apache-2.0

package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/ttrpc/events/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// guard bounds every wait for the publisher, so that a broken publisher fails the test instead
// of hanging it; nothing is asserted about how long the wait took.
const guard = time.Minute

// call is one Forward that reached containerd's side; the test answers it.
type call struct {
	env   *types.Envelope
	reply chan error
}

// eventsService stands in for containerd's ttrpc Events service: each Forward is handed to the
// test, which decides what containerd answers and when.
type eventsService struct {
	calls chan call
	stop  chan struct{}
}

func (s *eventsService) Forward(ctx context.Context, r *eventsapi.ForwardRequest) (*emptypb.Empty, error) {
	c := call{env: r.Envelope, reply: make(chan error, 1)}
	select {
	case s.calls <- c:
	case <-s.stop:
		return nil, errors.New("test over")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case err := <-c.reply:
		if err != nil {
			return nil, err
		}
		return &emptypb.Empty{}, nil
	case <-s.stop:
		return nil, errors.New("test over")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serveEvents serves an eventsService at path until the test ends.
func serveEvents(t *testing.T, path string) *eventsService {
	t.Helper()
	svc := &eventsService{calls: make(chan call), stop: make(chan struct{})}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	eventsapi.RegisterTTRPCEventsService(srv, svc)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		close(svc.stop)
		srv.Close()
		<-served
	})
	return svc
}

// next is the next Forward to reach containerd's side.
func (s *eventsService) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-s.calls:
		return c
	case <-time.After(guard):
		t.Fatal("no event forwarded")
		return call{}
	}
}

// take answers the next Forward with err, and returns the pid of the TaskExit it carried.
func (s *eventsService) take(t *testing.T, err error) uint32 {
	t.Helper()
	c := s.next(t)
	c.reply <- err
	return pidOf(t, c.env)
}

func pidOf(t *testing.T, env *types.Envelope) uint32 {
	t.Helper()
	var x eventstypes.TaskExit
	if err := proto.Unmarshal(env.GetEvent().GetValue(), &x); err != nil {
		t.Fatalf("decode the forwarded event: %v", err)
	}
	return x.Pid
}

// logs records what the publisher logs, for the test to wait on.
type logs struct {
	mu      sync.Mutex
	records []slog.Record
	changed chan struct{} // closed and replaced on every record
}

func newLogs() *logs { return &logs{changed: make(chan struct{})} }

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }

func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	close(l.changed)
	l.changed = make(chan struct{})
	return nil
}

// waitFor returns the attributes of the first record logged with msg, once there is one.
func (l *logs) waitFor(t *testing.T, msg string) map[string]slog.Value {
	t.Helper()
	deadline := time.After(guard)
	for {
		l.mu.Lock()
		changed := l.changed
		for _, r := range l.records {
			if r.Message == msg {
				attrs := map[string]slog.Value{}
				r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
				l.mu.Unlock()
				return attrs
			}
		}
		l.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("nothing logged as %q", msg)
		}
	}
}

func intAttr(t *testing.T, attrs map[string]slog.Value, key string) int64 {
	t.Helper()
	v, ok := attrs[key]
	if !ok || v.Kind() != slog.KindInt64 {
		t.Fatalf("logged without an integer %s: %v", key, attrs)
	}
	return v.Int64()
}

// running is a publisher for the Events service at path, with its Run loop going until the
// test ends.
func running(t *testing.T, path string, l *logs, maxQueued int) *Publisher {
	t.Helper()
	p := NewPublisher("unix://"+path, "ns", slog.New(l))
	if maxQueued > 0 {
		p.maxQueued = maxQueued
	}
	go p.Run()
	t.Cleanup(func() {
		// An ended context: Close gives up at once and Run returns, whatever is queued.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p.Close(ctx)
	})
	return p
}

func publishExit(p *Publisher, pid uint32) {
	p.Publish(TopicExit, &eventstypes.TaskExit{ContainerID: "c", ID: "c", Pid: pid})
}

func socketPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "events.sock")
}

// Events reach containerd in the order they were published, under their topic and namespace.
func TestEventsArriveInPublishOrder(t *testing.T) {
	path := socketPath(t)
	svc := serveEvents(t, path)
	p := running(t, path, newLogs(), 0)
	const n = 50
	for pid := uint32(1); pid <= n; pid++ {
		publishExit(p, pid)
	}
	for want := uint32(1); want <= n; want++ {
		c := svc.next(t)
		c.reply <- nil
		if got := pidOf(t, c.env); got != want {
			t.Fatalf("event %d forwarded as number %d", got, want)
		}
		if c.env.Topic != TopicExit || c.env.Namespace != "ns" {
			t.Fatalf("forwarded with topic %q, namespace %q; want %q, %q", c.env.Topic, c.env.Namespace, TopicExit, "ns")
		}
	}
}

// An event containerd refuses is sent again, before any later one, until containerd takes it.
func TestRefusedEventIsRetriedInOrder(t *testing.T) {
	path := socketPath(t)
	svc := serveEvents(t, path)
	p := running(t, path, newLogs(), 0)
	publishExit(p, 1)
	publishExit(p, 2)
	var got []uint32
	got = append(got, svc.take(t, errors.New("containerd is busy")))
	got = append(got, svc.take(t, errors.New("containerd is still busy")))
	got = append(got, svc.take(t, nil))
	got = append(got, svc.take(t, nil))
	if fmt.Sprint(got) != "[1 1 1 2]" {
		t.Fatalf("forwarded pids %v, want [1 1 1 2]: the refused event retried until taken, then the next", got)
	}
}

// An event published while nobody listens at TTRPC_ADDRESS (containerd restarting) reaches the
// Events service that comes up there later.
func TestEventWaitsForTheEventsService(t *testing.T) {
	path := socketPath(t)
	l := newLogs()
	p := running(t, path, l, 0)
	publishExit(p, 7)
	// The first attempt has failed: nothing listens yet.
	if n := intAttr(t, l.waitFor(t, "forward event"), "attempt"); n != 1 {
		t.Fatalf("first failure logged as attempt %d", n)
	}
	svc := serveEvents(t, path)
	if got := svc.take(t, nil); got != 7 {
		t.Fatalf("forwarded pid %d, want 7", got)
	}
}

// Past the bound, the oldest queued events are dropped and the newest kept, and the drop is
// logged with its count once containerd takes events again.
func TestQueueDropsTheOldest(t *testing.T) {
	path := socketPath(t)
	svc := serveEvents(t, path)
	l := newLogs()
	p := running(t, path, l, 3)
	publishExit(p, 1)
	// Event 1 is in flight, and stays so until the test answers: it is still first in the queue.
	first := svc.next(t)
	for pid := uint32(2); pid <= 6; pid++ {
		publishExit(p, pid)
	}
	p.mu.Lock()
	var queued []uint32
	for _, env := range p.queue {
		queued = append(queued, pidOf(t, env))
	}
	p.mu.Unlock()
	if fmt.Sprint(queued) != "[4 5 6]" {
		t.Fatalf("queued %v, want [4 5 6]: the newest three", queued)
	}
	first.reply <- nil
	var got []uint32
	for range 3 {
		got = append(got, svc.take(t, nil))
	}
	// The event in flight went out; 2 and 3 never will.
	if fmt.Sprint(got) != "[4 5 6]" {
		t.Fatalf("after the one in flight, forwarded %v; want [4 5 6]", got)
	}
	// Only what never goes out counts: the event in flight left the queue too, but was sent.
	if n := intAttr(t, l.waitFor(t, "events dropped while the events service was unreachable"), "count"); n != 2 {
		t.Fatalf("logged %d dropped events, want 2 (events 2 and 3)", n)
	}
}

// An event that a full queue let go of while it was in flight is not forwarded either when the
// shim exits before containerd takes it: the warning at exit counts it with the queued ones.
func TestExitWarningCountsTheEventInFlight(t *testing.T) {
	path := socketPath(t)
	svc := serveEvents(t, path)
	l := newLogs()
	p := running(t, path, l, 3)
	publishExit(p, 1)
	svc.next(t) // event 1 in flight, never answered
	for pid := uint32(2); pid <= 6; pid++ {
		publishExit(p, pid)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Close(ctx)
	if n := intAttr(t, l.waitFor(t, "events not forwarded at exit"), "queued"); n != 4 {
		t.Fatalf("logged %d events not forwarded, want 4 (1, in flight, and 4 to 6)", n)
	}
}

// Close returns once what was queued has been forwarded: the last TaskDelete must reach
// containerd before the shim exits. What is published after Close goes nowhere.
func TestCloseForwardsWhatIsQueued(t *testing.T) {
	path := socketPath(t)
	svc := serveEvents(t, path)
	p := NewPublisher(path, "ns", slog.New(newLogs()))
	ran := make(chan struct{})
	go func() { defer close(ran); p.Run() }()
	publishExit(p, 1)
	publishExit(p, 2)
	publishExit(p, 3)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	closed := make(chan struct{})
	go func() { defer close(closed); p.Close(ctx) }()
	var got []uint32
	for range 3 {
		got = append(got, svc.take(t, nil))
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("forwarded %v, want [1 2 3]", got)
	}
	<-closed
	<-ran
	if ctx.Err() != nil {
		t.Fatal("Close gave up before the queue was forwarded")
	}
	publishExit(p, 4)
	if n := p.pending(); n != 0 {
		t.Fatalf("%d events queued after Close", n)
	}
}
