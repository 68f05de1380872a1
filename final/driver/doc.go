// SPDX-License-Identifier: Apache-2.0

// Package driver plays containerd's part towards a runtime-v2 shim: it lays out bundles under a
// state directory, runs the shim binary's start and delete actions with containerd's flags and
// environment, reads every form of start reply, keeps bootstrap.json, and talks to the shim.
// shimctl and the tests of every step use it, so each step is driven exactly as containerd would.
package driver
