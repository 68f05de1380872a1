// SPDX-License-Identifier: Apache-2.0

// The long-lived shim's main loop: the listener from fd 3, the subreaper and its loops, the
// ttrpc server, and the order in which it all stops. It mirrors containerd v2.4
// pkg/shim/shim.go (run, serve) and pkg/shim/shim_unix.go (serveListener, setupSignals).

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	runc "github.com/containerd/go-runc"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/reaper"
	"github.com/shimwalk/shimwalk/final/shim/task"
)

// Config is what the long-lived shim is started with.
type Config struct {
	Namespace string
	ID        string
	// Version is the shim's version, which Connect reports.
	Version string
	Log     *slog.Logger
	// Listener is the socket the start helper bound; Serve removes its file when it stops
	// listening, if the path still names that socket.
	Listener *net.UnixListener
	// TTRPCAddress is containerd's Events service (TTRPC_ADDRESS).
	TTRPCAddress string
	// RuncRoot is runc's state root for containers whose runtime options name none.
	RuncRoot string
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
	// The loops (reaping, exits, OOM) run until every RPC has drained: a runc command still
	// running for an RPC needs the reap loop for its exit.
	ctx, stopLoops := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	defer func() { stopLoops(); loops.Wait() }()

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

	track := newTracker()
	shutdown := make(chan struct{})
	// Called by the Shutdown handler: the RPCs after it are refused from the moment it replies.
	requestShutdown := sync.OnceFunc(func() { track.stop(); close(shutdown) })
	// One watcher for every container of the shim. It calls the service, made just below, only
	// from Run, which starts after that.
	var svc *task.Service
	oom, err := cgroups.NewWatcher(func(id string) bool { return svc.CheckOOM(id) }, cfg.Log)
	if err != nil {
		cfg.Log.Warn("no oom watcher: only OOM kills of a container's processes that exit are reported", "err", err)
		oom = nil
	}
	svc = task.New(task.Config{
		Namespace: cfg.Namespace, Version: cfg.Version, Log: cfg.Log, Events: pub, Reaper: r, OOM: oom,
		RuncRoot: cfg.RuncRoot, Shutdown: requestShutdown,
	})
	if oom != nil {
		loops.Add(1)
		go func() { defer loops.Done(); oom.Run(ctx) }()
	}
	exits := r.Subscribe()
	defer r.Unsubscribe(exits)
	loops.Add(1)
	go func() { defer loops.Done(); svc.HandleExits(ctx, exits) }()

	sock := ownSocket(cfg.Listener)
	srv, err := ttrpc.NewServer(
		// The socket is 0600 in a 0700 directory already; the credential check still holds if
		// someone loosens the file modes.
		ttrpc.WithServerHandshaker(track.handshaker(ttrpc.UnixSocketRequireSameUser())),
		ttrpc.WithUnaryServerInterceptor(intercept(cfg.Log, track)),
	)
	if err != nil {
		return fmt.Errorf("new ttrpc server: %w", err)
	}
	registerTask(srv, svc)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), cfg.Listener) }()
	cfg.Log.Info("serving", "namespace", cfg.Namespace, "id", cfg.ID, "socket", sock.path, "pid", os.Getpid())

	select {
	case sig := <-signals:
		cfg.Log.Info("stopping", "signal", sig.String(), "containers", svc.Containers())
	case <-shutdown:
		cfg.Log.Info("stopping", "reason", "shutdown requested")
	case err := <-served:
		cfg.Log.Error("serve", "err", err)
	}
	// Stop listening, and take the socket's name with it while the listener still holds it:
	// from here on a start for this id binds a socket of its own, which must stay.
	track.stop()
	sock.remove(cfg.Log)
	cfg.Listener.Close()
	// Let every RPC in flight finish and its reply, the Shutdown reply among them, reach its
	// caller: a connection is closed by its client (containerd closes its own after
	// Shutdown), or when the grace ends. ttrpc's own Shutdown closes a connection it thinks
	// idle, which it may think while a reply is still on its way.
	grace, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if !track.drained(grace) {
		cfg.Log.Warn("closing connections still open after the grace", "connections", track.connections(), "rpcs", track.rpcs())
	}
	srv.Close()
	stopLoops()
	loops.Wait()
	cfg.Log.Info("stopped")
	return nil
}

// socketFile is the shim's socket in the file system, known by its inode: a start for the same
// id after this shim stopped listening may have put a socket of its own at the same path.
type socketFile struct {
	path     string
	dev, ino uint64
	ok       bool
}

// ownSocket records the socket ln is bound to. Nobody can have replaced it yet: while the
// listener lives, a start for the same id finds it served and reuses it.
func ownSocket(ln *net.UnixListener) socketFile {
	s := socketFile{path: ln.Addr().String()}
	var st unix.Stat_t
	if err := unix.Lstat(s.path, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		s.dev, s.ino, s.ok = st.Dev, st.Ino, true
	}
	return s
}

// remove removes the socket if the path still names it.
func (s socketFile) remove(log *slog.Logger) {
	var st unix.Stat_t
	if !s.ok || unix.Lstat(s.path, &st) != nil || st.Dev != s.dev || st.Ino != s.ino {
		log.Info("socket path no longer the shim's; left alone", "socket", s.path)
		return
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("remove socket", "err", err)
	}
}

// intercept turns a request that does not decode into InvalidArgument (ttrpc would say
// Unknown), and a panic in a handler into an error: one bad request must not take down every
// container the shim looks after.
func intercept(log *slog.Logger, track *tracker) ttrpc.UnaryServerInterceptor {
	return func(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (resp any, err error) {
		if !track.begin() {
			// A Shutdown asks for what is already under way, and is answered as containerd's runc
			// shim answers every Shutdown, with success: containerd sends one after each Delete of
			// a group's tasks, and fails the Delete on any answer but success or a closed
			// connection.
			if strings.HasSuffix(info.FullMethod, "/Shutdown") {
				return &emptypb.Empty{}, nil
			}
			return nil, status.Errorf(codes.Unavailable, "%s: the shim is shutting down", info.FullMethod)
		}
		defer track.end()
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
