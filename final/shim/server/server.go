// SPDX-License-Identifier: Apache-2.0

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	runc "github.com/containerd/go-runc"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/reaper"
	"github.com/shimwalk/shimwalk/final/shim/task"
)

// Config is what the long-lived shim is started with.
type Config struct {
	Namespace string
	ID        string
	Log       *slog.Logger
	// Listener is the socket the start helper bound; Serve removes its file when done.
	Listener *net.UnixListener
	// TTRPCAddress is containerd's Events service (TTRPC_ADDRESS).
	TTRPCAddress string
}

// InheritedListener is the socket the start helper passed as fd 3.
func InheritedListener() (*net.UnixListener, error) {
	f := os.NewFile(3, "shim socket")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listener on fd 3: %w", err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("fd 3 is a %T, not a unix listener", ln)
	}
	return ul, nil
}

// Serve runs the shim until Shutdown (with no container left) or SIGTERM/SIGINT.
func Serve(cfg Config) error {
	// Before anything forks: an orphan made earlier would not be ours to reap.
	if err := reaper.SetSubreaper(); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	defer func() { stop(); loops.Wait() }() // the loops below end with ctx

	r := reaper.New()
	runc.Monitor = r
	loops.Add(1)
	go func() { defer loops.Done(); r.Run(ctx) }()
	loops.Add(1)
	go func() { defer loops.Done(); dumpOnSignal(ctx, cfg.Log) }()

	// Caught from here to the very end: a SIGTERM during the final flush of events below must
	// not kill the shim with the last TaskDelete still queued.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	pub := events.NewPublisher(cfg.TTRPCAddress, cfg.Namespace, cfg.Log)
	go pub.Run() // ends in pub.Close, below
	defer func() {
		// Flush what is queued, the last TaskDelete above all, before the shim goes.
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pub.Close(flush)
	}()

	// One watcher for every container of the shim. It calls the service, made just below, only
	// from Run, which starts after that.
	var svc *task.Service
	oom, err := cgroups.NewWatcher(func(id string) bool { return svc.CheckOOM(id) }, cfg.Log)
	if err != nil {
		cfg.Log.Warn("no oom watcher: only OOM kills of a container's processes that exit are reported", "err", err)
		oom = nil
	}
	svc = task.New(task.Config{Namespace: cfg.Namespace, Log: cfg.Log, Events: pub, Reaper: r, OOM: oom, Shutdown: stop})
	if oom != nil {
		loops.Add(1)
		go func() { defer loops.Done(); oom.Run(ctx) }()
	}
	exits := r.Subscribe()
	defer r.Unsubscribe(exits)
	loops.Add(1)
	go func() { defer loops.Done(); svc.HandleExits(ctx, exits) }()

	srv, err := ttrpc.NewServer(
		// The socket is 0600 in a 0700 directory already; the credential check still holds if
		// someone loosens the file modes.
		ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()),
		ttrpc.WithUnaryServerInterceptor(intercept(cfg.Log)),
	)
	if err != nil {
		return fmt.Errorf("new ttrpc server: %w", err)
	}
	registerTask(srv, svc)

	path := cfg.Listener.Addr().String()
	served := make(chan error, 1)
	// Not ctx: the Shutdown RPC cancels ctx, and ttrpc closes a connection whose context ends,
	// which would drop the reply to that very Shutdown. srv.Shutdown below ends Serve.
	go func() { served <- srv.Serve(context.Background(), cfg.Listener) }()
	cfg.Log.Info("serving", "namespace", cfg.Namespace, "id", cfg.ID, "socket", path, "pid", os.Getpid())

	select {
	case sig := <-signals:
		cfg.Log.Info("stopping", "signal", sig.String(), "containers", svc.Containers())
	case <-ctx.Done():
		cfg.Log.Info("stopping", "reason", "shutdown requested")
	case err := <-served:
		cfg.Log.Error("serve", "err", err)
	}
	// Let replies in flight, the Shutdown reply among them, reach their callers.
	grace, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		srv.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove socket: %w", err)
	}
	cfg.Log.Info("stopped")
	return nil
}

// intercept turns a request that does not decode into InvalidArgument (ttrpc would say
// Unknown), and a panic in a handler into an error: one bad request must not take down every
// container the shim looks after.
func intercept(log *slog.Logger) ttrpc.UnaryServerInterceptor {
	return func(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic in handler", "method", info.FullMethod, "panic", r)
				err = status.Errorf(codes.Internal, "%s: internal error", info.FullMethod)
			}
		}()
		decode := func(v any) error {
			if err := unmarshal(v); err != nil {
				return status.Errorf(codes.InvalidArgument, "%s: malformed request: %v", info.FullMethod, err)
			}
			return nil
		}
		begin := time.Now()
		resp, err = method(ctx, decode)
		log.Debug("rpc", "method", info.FullMethod, "took", time.Since(begin), "err", err)
		return resp, err
	}
}
