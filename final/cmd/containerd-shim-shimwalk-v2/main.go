// SPDX-License-Identifier: Apache-2.0

// Command containerd-shim-shimwalk-v2 is shimwalk's production runc shim, runtime
// io.containerd.shimwalk.v2.
package main

import (
	"os"
	"runtime/debug"

	"github.com/shimwalk/shimwalk/final/shim/bootstrap"
)

// version and revision are set with -ldflags "-X main.version=... -X main.revision=...". Without
// them, a `go install ...@version` build reports the module version (and no revision: the
// module proxy's zip carries no VCS data), and a build in a clone reports its VCS revision.
var version, revision string

func main() {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && revision == "" {
				revision = s.Value
			}
		}
	}
	if version == "" {
		version = "dev"
	}
	os.Exit(bootstrap.Main(os.Args[1:], version, revision))
}
