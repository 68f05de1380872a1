// SPDX-License-Identifier: Apache-2.0

// Step 01: the long-lived shim. It has no RPC yet: each connection gets one JSON line that names
// the shim, proof that the address from `start` reaches the process that `start` left behind.
// Step 02 replaces this file's loop with the ttrpc server of containerd v2.4 pkg/shim/shim.go serve.
package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func serve(o options) error {
	logger, logFile, err := openLog(o.debug)
	if err != nil {
		return err
	}
	defer logFile.Close()
	ln, err := inheritedListener()
	if err != nil {
		return err
	}
	path := ln.Addr().String()
	logger.Info("serving", "namespace", o.namespace, "id", o.id, "socket", path, "pid", os.Getpid())

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		// Owned by serve: closing the listener ends the accept loop below, which ends serve.
		sig := <-signals
		logger.Info("stopping", "signal", sig.String())
		tracePoint("shim", "", false, "told to stop: closes the listener, removes the socket, exits")
		ln.Close()
	}()

	hello := struct {
		ID        string `json:"id"`
		Namespace string `json:"namespace"`
		Pid       int    `json:"pid"`
	}{o.id, o.namespace, os.Getpid()}
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			break
		}
		if err != nil {
			// An error that persists, EMFILE above all, fails every Accept at once: retrying
			// straight away would spin on a CPU and flood the log. Back off, doubling from 5 ms
			// to a second, as net/http's server and ttrpc's do.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			logger.Error("accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if err := json.NewEncoder(conn).Encode(hello); err != nil {
			logger.Warn("greet", "err", err)
		}
		conn.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	logger.Info("stopped")
	return nil
}
