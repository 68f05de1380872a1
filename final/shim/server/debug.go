// SPDX-License-Identifier: Apache-2.0

// The goroutine dump on SIGUSR1. Mirrors dumpStacks in containerd v2.4 pkg/shim/shim.go; unlike
// it, the count of goroutines is a log attribute of its own, so that a leak check can read it
// without parsing the stacks.

package server

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

// dumpOnSignal logs every goroutine's stack each time the shim gets SIGUSR1, until ctx ends.
// It is the only way to see inside a shim that seems stuck, and to count its goroutines from
// outside: /proc shows threads, not goroutines.
func dumpOnSignal(ctx context.Context, log *slog.Logger) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-usr1:
			dumpStacks(log)
		}
	}
}

func dumpStacks(log *slog.Logger) {
	// Counted before the stacks are taken: the dump itself starts no goroutine.
	n := runtime.NumGoroutine()
	buf := make([]byte, 16<<10)
	for {
		size := runtime.Stack(buf, true)
		if size < len(buf) {
			buf = buf[:size]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	log.Info("goroutine dump", "pid", os.Getpid(), "goroutines", n, "stacks", string(buf))
}
