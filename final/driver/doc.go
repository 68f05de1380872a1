// SPDX-License-Identifier: Apache-2.0

// Package driver plays containerd's part towards a runtime-v2 shim: it lays out bundles under a
// state directory, runs the shim binary's start and delete actions with containerd's flags and
// environment, reads every form of start reply, keeps bootstrap.json, and talks to the shim.
// shimctl and the tests of every step use it, so each step is driven exactly as containerd would.
// It also runs a private containerd of any release, and builds its ctr command lines
// (containerd.go), for the end-to-end tests, the benchmark and the pod lab, and reads the process
// table (proc.go) for whoever looks for what a run left behind.
//
// driver.go holds the state directory and the shim's start and delete actions, reply.go the
// start reply and bootstrap.json, spec.go and rootfs.go what a bundle holds, client.go the
// connection to a shim, lifecycle.go a task's teardown, stdio.go the FIFOs, events.go the
// Events service shims publish to, reconnect.go the walk after a restart, ids.go the id rule,
// and trace.go the record of what the driver did.
package driver
