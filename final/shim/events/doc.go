// SPDX-License-Identifier: Apache-2.0

// Package events forwards task events to containerd's ttrpc Events service.
//
// It mirrors containerd v2.4 pkg/shim/publisher.go (RemoteEventsPublisher: a queue drained by
// one goroutine that forwards over ttrpc to TTRPC_ADDRESS). Unlike it, an event is retried
// until containerd takes it, in a bounded queue that drops the oldest: containerd's shim gives
// up after a few attempts, and an exit that happens while containerd restarts is lost
// (containerd issue #6771).
package events
