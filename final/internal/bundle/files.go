// SPDX-License-Identifier: Apache-2.0

// The names of a bundle's files, and its small pid and address files, as containerd v2.4's
// pkg/shim (WritePidFile, ReadAddress in util.go) and core/runtime/v2 (bundle.go) name them.

package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/shimwalk/shimwalk/final/internal/fsutil"
)

// The files of a bundle; doc.go says who writes and who reads each.
const (
	ConfigFile     = "config.json"      // the OCI runtime spec
	RootfsDir      = "rootfs"           // where the task's root file system is mounted
	AddressFile    = "address"          // the long-lived shim's socket address
	ShimPidFile    = "shim.pid"         // the long-lived shim's pid
	InitPidFile    = "init.pid"         // the container's init pid, written by runc
	ExitFile       = "exit.json"        // the init's exit
	OptionsFile    = "options.json"     // the runtime options the container was created with
	RuncLogFile    = "log.json"         // runc's log, JSON lines
	BootstrapFile  = "bootstrap.json"   // the shim's start reply, kept by its caller
	ShimBinaryFile = "shim-binary-path" // the shim binary that started the shim, for its delete action
	LogFIFO        = "log"              // the FIFO containerd reads the shim's log from
	ShimLogFile    = "shim.log"         // the shim's log when nobody reads the FIFO
)

// ExecPidFile names the pid file runc writes for the exec process id. Not <id>.pid: exec ids
// are the caller's to choose, and "init" or "shim" would replace the bundle's init.pid or
// shim.pid, which the delete action and containerd read once the shim is gone.
func ExecPidFile(id string) string {
	return "exec-" + id + ".pid"
}

// ReadPidFile reads a file holding one pid, as runc and the shims write them.
func ReadPidFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s holds no pid: %q", path, data)
	}
	return pid, nil
}

// WritePidFile records pid at path, atomically.
func WritePidFile(path string, pid int) error {
	return fsutil.WriteFileAtomic(path, []byte(strconv.Itoa(pid)), 0o600)
}

// WriteAddress records the shim's address as dir's address file, atomically.
func WriteAddress(dir, address string) error {
	return fsutil.WriteFileAtomic(filepath.Join(dir, AddressFile), []byte(address), 0o600)
}

// ReadAddress reads dir's address file.
func ReadAddress(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, AddressFile))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}
