// SPDX-License-Identifier: Apache-2.0

// Command shimctl plays containerd's part towards a shim, for experiments on one machine.
package main

import (
	"os"

	"github.com/shimwalk/shimwalk/final/driver/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
